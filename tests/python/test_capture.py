"""fact.capture: small modules, the dynamo fallback, the example blocks, the model-file CLI."""
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fact
from fact.capture import CaptureError, main as capture_main
from fact.graph_writer import dumps_graph
from fact.model_file import build_from_model_file

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS = REPO_ROOT / "bench" / "models"
FIXTURES = REPO_ROOT / "tests" / "data" / "graphs"


def targets(doc):
    return [n["target"] for n in doc["nodes"]]


def values(doc):
    return {v["id"]: v for v in doc["values"]}


def check_well_formed(doc):
    """The invariants the C++ loader checks: unique ids, references defined before use."""
    assert doc["schema"] == "fact.graph/1"
    ids = [v["id"] for v in doc["values"]]
    assert len(ids) == len(set(ids))
    node_ids = [n["id"] for n in doc["nodes"]]
    assert len(node_ids) == len(set(node_ids))
    table = values(doc)
    defined = {v["id"] for v in doc["values"] if v["kind"] != "intermediate"}

    def uses(arg):
        if "tensor" in arg:
            yield arg["tensor"]
        elif "tensors" in arg:
            yield from (t for t in arg["tensors"] if t is not None)

    for node in doc["nodes"]:
        for arg in list(node["args"]) + list(node["kwargs"].values()):
            assert len(arg) == 1
            for used in uses(arg):
                assert used in defined, f"{node['id']} uses {used} before it is defined"
        for out in node["outputs"]:
            assert table[out]["kind"] == "intermediate" and out not in defined
            defined.add(out)
    for v in doc["values"]:
        assert len(v["shape"]) == len(v["stride"])
    assert all(table[i]["kind"] == "input" for i in doc["inputs"])
    assert all(o in defined for o in doc["outputs"])
    json.dumps(doc, allow_nan=False)  # strict JSON: no NaN / Infinity literals


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 16)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_linear_relu():
    doc = fact.capture(LinearRelu(), (torch.randn(8, 32),))
    check_well_formed(doc)
    assert doc["source"]["capture"] == "torch.export"
    assert doc["source"]["export_error"] is None
    assert doc["source"]["module"] == "LinearRelu"
    assert targets(doc) == ["aten.linear.default", "aten.relu.default"]
    table = values(doc)
    weight = next(v for v in doc["values"] if v["kind"] == "parameter" and v["target"] == "fc.weight")
    assert weight["shape"] == [16, 32] and weight["stride"] == [32, 1] and weight["dtype"] == "float32"
    linear = doc["nodes"][0]
    assert linear["args"][0] == {"tensor": doc["inputs"][0]}
    assert linear["args"][1] == {"tensor": weight["id"]}
    assert table[doc["outputs"][0]]["shape"] == [8, 16]
    assert table[doc["inputs"][0]]["device"] == "cpu"
    assert "data" not in json.dumps(doc)  # weights are named, never inlined


class Bmm(torch.nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def test_bmm_two_inputs_in_call_order():
    a, b = torch.randn(4, 8, 16), torch.randn(4, 16, 2)
    doc = fact.capture(Bmm(), (a, b))
    check_well_formed(doc)
    assert targets(doc) == ["aten.bmm.default"]
    table = values(doc)
    assert [table[i]["shape"] for i in doc["inputs"]] == [[4, 8, 16], [4, 16, 2]]
    assert table[doc["outputs"][0]]["shape"] == [4, 8, 2]


class MatmulTransposed(torch.nn.Module):
    def forward(self, x, w):
        return torch.matmul(x, w.transpose(0, 1))


def test_matmul_with_transpose_keeps_view_strides():
    doc = fact.capture(MatmulTransposed(), (torch.randn(8, 4), torch.randn(6, 4)))
    check_well_formed(doc)
    assert targets(doc) == ["aten.transpose.int", "aten.matmul.default"]
    transposed = values(doc)[doc["nodes"][0]["outputs"][0]]
    assert transposed["shape"] == [4, 6] and transposed["stride"] == [1, 4]
    assert doc["nodes"][0]["args"][1:] == [{"const": 0}, {"const": 1}]


class ScaledWithConstants(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(0.25))

    def forward(self, x):
        return x.masked_fill(x > 0, float("-inf")) * self.scale + torch.tensor(3.0)


def test_constants_scalars_and_non_finite_floats():
    doc = fact.capture(ScaledWithConstants(), torch.randn(4, 4))
    check_well_formed(doc)
    buffer = next(v for v in doc["values"] if v["kind"] == "buffer")
    assert buffer["target"] == "scale" and buffer["scalar"] == 0.25 and buffer["shape"] == []
    constants = [v for v in doc["values"] if v["kind"] == "constant"]
    assert [c["scalar"] for c in constants] == [3.0]
    masked = next(n for n in doc["nodes"] if n["target"].startswith("aten.masked_fill"))
    assert masked["args"][2] == {"float": "-inf"}
    assert "Infinity" not in dumps_graph(doc)


class SplitHeads(torch.nn.Module):
    def forward(self, x):
        a, b = x.split(4, dim=-1)
        return a * b, b


def test_tuple_results_are_folded_into_node_outputs():
    doc = fact.capture(SplitHeads(), torch.randn(2, 8))
    check_well_formed(doc)
    assert "getitem" not in " ".join(targets(doc))
    split = next(n for n in doc["nodes"] if n["target"] == "aten.split.Tensor")
    assert len(split["outputs"]) == 2
    mul = next(n for n in doc["nodes"] if n["target"] == "aten.mul.Tensor")
    assert mul["args"] == [{"tensor": split["outputs"][0]}, {"tensor": split["outputs"][1]}]
    assert doc["outputs"] == [mul["outputs"][0], split["outputs"][1]]


class GradModeAndAutocast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.no_grad():
            y = self.fc(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = self.fc(y)
        return y.relu() + z


def test_grad_mode_regions_are_inlined_and_other_higher_order_ops_stay_opaque():
    doc = fact.capture(GradModeAndAutocast(), torch.randn(2, 8))
    check_well_formed(doc)
    assert targets(doc) == ["aten.linear.default", "higher_order.wrap_with_autocast",
                            "aten.relu.default", "aten.add.Tensor"]
    inlined, opaque = doc["nodes"][0], doc["nodes"][1]
    assert inlined["args"][0] == {"tensor": "x"}
    assert {"repr": "<subgraph submod_1>"} in opaque["args"]
    assert opaque["args"][5] == {"tensor": inlined["outputs"][0]}
    assert values(doc)[opaque["outputs"][0]]["dtype"] == "bfloat16"


class DataDependentBranch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:  # data-dependent control flow: torch.export cannot trace it
            return torch.relu(y) * 2
        return y - 1


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["relu_branch", "sub_branch"])
def test_unexportable_module_falls_back_to_dynamo(sign):
    module = DataDependentBranch()
    with torch.no_grad():
        module.fc.weight.copy_(torch.eye(8))
        module.fc.bias.zero_()
    x = sign * (torch.rand(4, 8) + 0.1)  # fc(x) == x: its sign picks the branch
    with pytest.warns(UserWarning, match="torch.export failed"):
        doc = fact.capture(module, (x,))
    check_well_formed(doc)
    source = doc["source"]
    assert source["capture"] == "dynamo"
    assert source["export_error"] and "data-dependent" in source["export_error"]
    assert source["subgraph_calls"] == 2
    assert doc["inputs"] == ["x"]
    nodes = targets(doc)
    assert nodes[:3] == ["aten.linear.default", "aten.sum.default", "aten.gt.Scalar"]
    if sign > 0:
        assert nodes[3:] == ["aten.relu.default", "aten.mul.Tensor"]
    else:
        assert nodes[3:] == ["aten.sub.Tensor"]
    # the second subgraph reads the first one's linear output, linked by tensor identity
    assert doc["nodes"][3]["args"][0] == {"tensor": doc["nodes"][0]["outputs"][0]}
    assert all(n["id"].startswith(("g0_", "g1_")) for n in doc["nodes"])
    weight = values(doc)["p_fc_weight"]
    assert weight["kind"] == "parameter" and weight["target"] == "fc.weight"
    assert doc["outputs"] == [doc["nodes"][-1]["outputs"][0]]


class HeadSplitThenMaskBranch(torch.nn.Module):
    """corpus/misc_data_dependent_branch in small: a fused qkv split into heads (view with
    sizes read from the input, unpacked along a dim), then a branch on the padding mask."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 24)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.fc(x).view(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        if mask.all():
            return q + k
        return q * v


def test_dynamo_fallback_after_shape_guards_in_the_first_frame():
    """The fallback's per-frame ATen trace must not leave guards in dynamo's ShapeEnv: it did
    (make_fx reused dynamo's fake mode), and dynamo then failed building the frame's guards
    (InternalTorchDynamoError: IndexError), so such models could not be captured at all."""
    x, mask = torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)
    with pytest.warns(UserWarning, match="torch.export failed"):
        doc = fact.capture(HeadSplitThenMaskBranch(), (x, mask))
    check_well_formed(doc)
    assert doc["source"]["capture"] == "dynamo" and doc["source"]["subgraph_calls"] == 2
    assert targets(doc)[0] == "aten.linear.default"
    assert "aten.all.default" in targets(doc) and targets(doc)[-1] == "aten.add.Tensor"


def test_capture_writes_the_file(tmp_path):
    path = tmp_path / "sub" / "g.json"
    doc = fact.capture(LinearRelu(), (torch.randn(2, 32),), path=path)
    assert json.loads(path.read_text()) == doc


def test_meta_device_capture():
    with torch.device("meta"):
        module, x = LinearRelu(), torch.randn(8, 32)
    doc = fact.capture(module, (x,))
    check_well_formed(doc)
    assert {v["device"] for v in doc["values"]} == {"meta"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (GPU tests run on the device host)")
def test_cuda_capture():
    doc = fact.capture(LinearRelu().cuda(), (torch.randn(8, 32, device="cuda"),))
    assert {v["device"] for v in doc["values"]} == {"cuda:0"}


# --- the example blocks, full size on the meta device -------------------------------------------


def test_mingpt_block_capture():
    module, inputs = build_from_model_file(f"{MODELS / 'mingpt_block.py'}:MinGPTBlock", "bfloat16", "meta")
    doc = fact.capture(module, inputs)
    check_well_formed(doc)
    t = targets(doc)
    assert t.count("aten.linear.default") == 4
    assert t.count("aten.matmul.default") == 2
    for op in ("aten.softmax.int", "aten.tanh.default", "aten.masked_fill.Scalar", "aten.layer_norm.default",
               "aten.pow.Tensor_Scalar", "aten.split.Tensor"):
        assert op in t, op
    table = values(doc)
    assert table["x"]["shape"] == [128, 512, 768] and table["x"]["dtype"] == "bfloat16"
    mask = next(v for v in doc["values"] if v["kind"] == "buffer")
    assert mask["target"] == "attn.bias" and mask["shape"] == [1, 1, 512, 512]
    scale = next(n for n in doc["nodes"] if n["target"] == "aten.mul.Tensor")
    assert scale["args"][1]["const"] == pytest.approx(1 / math.sqrt(96))
    attn_scores = values(doc)[next(n for n in doc["nodes"] if n["target"] == "aten.matmul.default")["outputs"][0]]
    assert attn_scores["shape"] == [128, 8, 512, 512]


def test_llama_block_capture():
    module, inputs = build_from_model_file(f"{MODELS / 'llama_block.py'}:LlamaDecoderBlock", "bfloat16", "meta")
    doc = fact.capture(module, inputs)
    check_well_formed(doc)
    t = targets(doc)
    assert t.count("aten.linear.default") == 7
    assert t.count("aten.matmul.default") == 2
    assert t.count("aten.repeat_interleave.self_int") == 2
    for op in ("aten.silu.default", "aten.softmax.int", "aten.rsqrt.default", "aten.cat.default"):
        assert op in t, op
    assert not any("assert" in target for target in t)
    params = {v["target"]: v["shape"] for v in doc["values"] if v["kind"] == "parameter"}
    assert params["self_attn.q_proj.weight"] == [4096, 4096]
    assert params["self_attn.k_proj.weight"] == [1024, 4096]
    assert params["mlp.gate_proj.weight"] == [14336, 4096]
    assert params["mlp.down_proj.weight"] == [4096, 14336]
    assert values(doc)[doc["outputs"][0]]["shape"] == [4, 2048, 4096]


def test_example_blocks_run_eagerly_at_small_size():
    """The model files are real modules: a reduced size runs and keeps shapes."""
    sys.path.insert(0, str(MODELS))
    try:
        import llama_block
        import mingpt_block
    finally:
        sys.path.remove(str(MODELS))
    gpt = mingpt_block.MinGPTBlock(embed=64, heads=4, max_seq_len=16)
    x = torch.randn(2, 16, 64)
    assert gpt(x).shape == x.shape
    llama = llama_block.LlamaDecoderBlock(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96,
                                          max_seq_len=16)
    y = torch.randn(2, 16, 64)
    out = llama(y)
    assert out.shape == y.shape and torch.isfinite(out).all()
    # causality: changing a later token leaves earlier outputs unchanged
    y2 = y.clone()
    y2[:, -1] += 1.0
    assert torch.allclose(llama(y2)[:, :-1], out[:, :-1], atol=1e-5)
    # the SDPA twin (the Llama torch.compile baseline) shares the weights and computes the same
    twin = llama_block.sdpa_twin(llama)
    assert torch.allclose(twin(y), out, atol=1e-5, rtol=1e-4)
    assert twin.self_attn.q_proj.weight.data_ptr() != llama.self_attn.q_proj.weight.data_ptr()
    assert torch.equal(twin.self_attn.q_proj.weight, llama.self_attn.q_proj.weight)
    x2 = x.clone()
    x2[:, -1] += 1.0
    assert torch.allclose(gpt(x2)[:, :-1], gpt(x)[:, :-1], atol=1e-5)


def test_committed_fixtures_are_up_to_date():
    result = subprocess.run([sys.executable, str(FIXTURES / "regenerate.py"), "--check"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr


# --- model files and the CLI --------------------------------------------------------------------


def test_cli_on_model_file(tmp_path):
    out = tmp_path / "gpt.json"
    env_path = str(REPO_ROOT / "python")
    result = subprocess.run(
        [sys.executable, "-m", "fact.capture", f"{MODELS / 'mingpt_block.py'}:MinGPTBlock", "-o", str(out),
         "--dtype", "bfloat16", "--device", "meta"],
        capture_output=True, text=True, timeout=600,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "RuntimeWarning" not in result.stderr
    doc = json.loads(out.read_text())
    assert doc == json.loads((FIXTURES / "mingpt_block_bf16.json").read_text())


def write_model(tmp_path, body):
    path = tmp_path / "model.py"
    path.write_text("import torch\n" + body)
    return path


def test_cli_missing_get_inputs(tmp_path, capsys):
    path = write_model(tmp_path, "class M(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    assert capture_main([f"{path}:M", "-o", str(tmp_path / "g.json")]) == 1
    assert f"model file {path} defines no get_inputs()" in capsys.readouterr().err
    assert not (tmp_path / "g.json").exists()


def test_cli_missing_file_and_class(tmp_path, capsys):
    assert capture_main([f"{tmp_path / 'nope.py'}:M", "-o", str(tmp_path / "g.json")]) == 1
    assert "does not exist" in capsys.readouterr().err
    path = write_model(tmp_path, "def get_inputs():\n    return []\n")
    assert capture_main([f"{path}:Missing", "-o", str(tmp_path / "g.json")]) == 1
    assert "defines no torch.nn.Module class Missing" in capsys.readouterr().err
    assert capture_main([str(path), "-o", str(tmp_path / "g.json")]) == 1
    assert "expected path/to/model.py:ClassName" in capsys.readouterr().err


def test_model_file_without_dtype_arguments_is_converted(tmp_path):
    path = write_model(tmp_path, (
        "class M(torch.nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n        self.fc = torch.nn.Linear(n, n)\n"
        "    def forward(self, x, idx):\n        return self.fc(x)[idx]\n"
        "def get_inputs():\n    return [torch.randn(3, 5), torch.tensor([0, 2])]\n"
        "def get_init_inputs():\n    return [5]\n"))
    out = tmp_path / "g.json"
    assert capture_main([f"{path}:M", "-o", str(out), "--dtype", "float16"]) == 0
    doc = json.loads(out.read_text())
    table = values(doc)
    assert [table[i]["dtype"] for i in doc["inputs"]] == ["float16", "int64"]
    assert table["p_fc_weight"]["dtype"] == "float16"


def test_capture_error_when_both_paths_fail():
    class Hopeless(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x

    with torch.device("meta"):
        module, x = Hopeless(), torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CaptureError, match="torch.export failed .* dynamo fallback failed"):
            fact.capture(module, (x,))


def test_version_is_exported():
    assert isinstance(fact.__version__, str) and fact.__version__


def test_a_wrong_class_name_lists_the_classes_the_file_defines(tmp_path, capsys):
    path = write_model(tmp_path, ("class MinGPTBlock(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                                  "class Helper(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                                  "def get_inputs():\n    return [torch.randn(2)]\n"))
    assert capture_main([f"{path}:MinGptBlock", "-o", str(tmp_path / "g.json")]) == 1
    err = capsys.readouterr().err
    assert "defines no torch.nn.Module class MinGptBlock" in err
    assert "it defines Helper, MinGPTBlock" in err and "did you mean MinGPTBlock?" in err
    assert "torch.nn.Linear" not in err  # classes it imports are not its own


def test_an_import_error_names_the_model_files_line(tmp_path, capsys):
    path = write_model(tmp_path, "x = 1\nraise ValueError('bad config')\n")
    assert capture_main([f"{path}:M", "-o", str(tmp_path / "g.json")]) == 1
    err = capsys.readouterr().err
    assert f"failed to import at {path}:3 in <module>: ValueError: bad config" in err


def test_a_forward_that_raises_names_the_model_files_line(tmp_path, capsys):
    path = write_model(tmp_path, ("class M(torch.nn.Module):\n"
                                  "    def forward(self, x):\n"
                                  "        y = x + 1\n"
                                  "        raise RuntimeError('shape mismatch in my layer')\n"
                                  "def get_inputs():\n    return [torch.randn(2)]\n"))
    assert capture_main([f"{path}:M", "-o", str(tmp_path / "g.json")]) == 1
    err = capsys.readouterr().err
    assert "shape mismatch in my layer" in err
    assert f"the forward raised at {path}:5 in forward" in err, err
