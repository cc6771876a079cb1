"""Attention end to end through the engine and fact.optimize.

CPU (CI): the corpus' attention forms and the transformers blocks are captured at small sizes
and discovered by the engine: each attention is accepted or declined with its precise reason
(no pending match, no crash); fact.optimize composes the attention replacement of nanoGPT's
slow path (tril buffer sliced [:T, :T]), of the minGPT block and of GPT-2's transformers block
(an additive mask computed in the graph) with the host reference, verified against the
original subgraph in float64 with the real mask, and the composed module matches the original.

GPU (marked `gpu`, skipped elsewhere): the minGPT block in bf16 through fact.optimize with the
rendered attention kernel compiled, and the kernel alone through `fact run-kernel` (the
attention runtime's verification and timing)."""
import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import fact.compose  # noqa: E402
from fact import _engine  # noqa: E402
from fact.graph_capture import capture  # noqa: E402

ENGINE_CAN_PLAN, ENGINE_WHY_NOT = fact.compose.engine_can_plan()
needs_engine_plan = pytest.mark.skipif(
    not ENGINE_CAN_PLAN, reason=f"the engine's in-process planning is not available: {ENGINE_WHY_NOT}")


def _engine_or_skip() -> Path:
    try:
        return _engine.engine_path()
    except _engine.EngineNotFound as error:
        pytest.skip(f"no fact engine: {error}")


def load_model_file(path: Path, sizes: dict | None = None):
    """A model file (the corpus, bench/models) as a module, at its CPU_TEST_SIZES (then `sizes`)."""
    spec = importlib.util.spec_from_file_location(f"attention_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in {**getattr(module, "CPU_TEST_SIZES", {}), **(sizes or {})}.items():
        setattr(module, key, value)
    return module


def build(module, dtype=torch.bfloat16):
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(dtype).eval()
    return model, tuple(module.get_inputs(dtype=dtype))


def discover(model, inputs, tmp_path: Path, name: str) -> list[dict]:
    graph = tmp_path / f"{name}.json"
    capture(model, inputs, str(graph))
    out = tmp_path / f"{name}.discovery.json"
    subprocess.run([str(_engine_or_skip()), "discover", str(graph), "--no-tuning-db", "--json", str(out)],
                   check=True, capture_output=True)
    return [m for m in json.loads(out.read_text())["matches"] if m.get("pattern") == "attention"]


# Each corpus file at its CPU sizes (head dims 16 / 32 there): what its attention becomes. A
# reason names what is declined; None: accepted. Files whose attention FACT does not recognize
# at all are listed in NOT_RECOGNIZED with why.
EXPECTED = {
    "attention_additive_mask": "head dim 32",
    "attention_bidirectional_timm": "head dim 16",
    "attention_causal_tril_buffer": "head dim 32",
    "attention_cross": "head dim 32",
    "attention_einsum": "head dim 32",
    "attention_finfo_min": "model input 'attention_mask'",
    "attention_gqa_repeat_interleave": "head dim 32",
    "attention_gqa_repeat_kv": "head dim 32",
    "attention_neg_1e4": "head dim 32",
    "attention_neox_partial_rotary": "head dim 32",
    "attention_sdpa_bool_mask": "head dim 16",
    "attention_sdpa_is_causal": "head dim 32",
    "hf_bert_layer": "model input 'attention_mask'",
    "hf_gemma_decoder": "model input 'attention_mask'",
    "hf_gpt2_block": "head dim 32",
    "hf_llama_decoder": "head dim 16",
    "hf_mistral_decoder": "head dim 16",
    "hf_phi3_decoder": "head dim 32",
    "hf_qwen2_decoder": "head dim 32",
    "hf_vit_layer": "head dim 32",
}
NOT_RECOGNIZED: dict[str, str] = {}
CORPUS = REPO_ROOT / "corpus"


@pytest.mark.parametrize("name", sorted(EXPECTED) + sorted(NOT_RECOGNIZED))
def test_corpus_attention_is_accepted_or_declined_with_its_reason(name, tmp_path):
    path = CORPUS / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    if name.startswith("hf_") and importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    model, inputs = build(load_model_file(path))
    matches = discover(model, inputs, tmp_path, name)
    if name in NOT_RECOGNIZED:
        assert matches == [], NOT_RECOGNIZED[name]
        return
    assert matches, f"{name}: no attention match"
    for match in matches:
        assert match["status"] in ("accepted", "declined"), match
        assert match["status"] == "declined" and EXPECTED[name] in match["reason"], (name, match["reason"])


# The same files at sizes with a head dim the kernel has (64): accepted.
ACCEPTED_AT_D64 = {
    "attention_causal_tril_buffer": {"N_EMBD": 128, "N_HEAD": 2},
    "attention_sdpa_is_causal": {"N_EMBD": 128, "N_HEAD": 2},
    "attention_gqa_repeat_interleave": {"HIDDEN": 256, "N_HEADS": 4, "N_KV_HEADS": 2},
    "attention_bidirectional_timm": {"DIM": 128, "NUM_HEADS": 2},
    "attention_neg_1e4": {"D_MODEL": 128, "N_HEADS": 2},
    "attention_einsum": {"DIM": 192, "HEADS": 3},
}


@pytest.mark.parametrize("name", sorted(ACCEPTED_AT_D64))
def test_corpus_attention_at_head_dim_64_is_accepted(name, tmp_path):
    path = CORPUS / f"{name}.py"
    module = load_model_file(path)
    sizes = {k: v for k, v in ACCEPTED_AT_D64[name].items() if hasattr(module, k)}
    if len(sizes) != len(ACCEPTED_AT_D64[name]):
        pytest.skip(f"{name} has other size names than {sorted(ACCEPTED_AT_D64[name])}")
    model, inputs = build(load_model_file(path, sizes))
    matches = discover(model, inputs, tmp_path, name)
    assert matches and all(m["status"] == "accepted" for m in matches), matches


def _compose(model, inputs, tmp_path):
    with torch.no_grad():
        composed = fact.compose.optimize(model, inputs, work_dir=tmp_path / "work", remainder="eager",
                                         speed_guard=False)
        return composed, model(*inputs), composed(*inputs)


def _attention_entries(report):
    return [entry for entry in report.composed if entry.pattern == "attention"]


def _close(got, want, tolerance=2e-2):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item() <= tolerance


@needs_engine_plan
def test_tril_buffer_attention_composes_on_the_cpu(tmp_path):
    module = load_model_file(CORPUS / "attention_causal_tril_buffer.py", {"N_EMBD": 128, "N_HEAD": 2})
    model, inputs = build(module)
    composed, want, got = _compose(model, inputs, tmp_path)
    report = composed.fact_report
    attention = _attention_entries(report)
    assert len(attention) == 1, str(report)
    assert attention[0].verified and attention[0].implementation == "host reference", str(report)
    assert attention[0].rel_err < 1e-2
    assert _close(got, want), str(report)
    # The plan's call reads the fused projection three times (Q, K, V at their offsets) and
    # writes the merged heads the output projection reads.
    plan = json.loads((tmp_path / "work" / "plan.json").read_text())
    call = next(r for r in plan["replacements"] if r["pattern"] == "attention")["calls"][0]
    assert call["kind"] == "attention" and call["args"]["size"] == 248
    assert [o["value"] for o in call["operands"]] == ["linear"]
    assert [p["element_offset"] for p in call["args"]["pointers"]] == [0, 128, 256, 0]
    assert call["results"][0]["value"] == "contiguous"


@needs_engine_plan
def test_mingpt_block_composes_attention_and_gemms_on_the_cpu(tmp_path):
    module = load_model_file(REPO_ROOT / "bench/models/mingpt_block.py")
    torch.manual_seed(0)
    model = module.MinGPTBlock(128, 2, 16).to(torch.bfloat16).eval()
    inputs = (torch.randn(2, 16, 128, dtype=torch.bfloat16),)
    composed, want, got = _compose(model, inputs, tmp_path)
    report = composed.fact_report
    assert len(_attention_entries(report)) == 1, str(report)
    assert not report.left_to_pytorch, str(report)
    assert all(entry.verified for entry in report.composed)
    assert _close(got, want), str(report)


@needs_engine_plan
def test_einsum_attention_composes_on_the_cpu(tmp_path):
    module = load_model_file(CORPUS / "attention_einsum.py", {"DIM": 192, "HEADS": 3})
    model, inputs = build(module)
    composed, want, got = _compose(model, inputs, tmp_path)
    attention = _attention_entries(composed.fact_report)
    assert len(attention) == 1 and attention[0].verified, str(composed.fact_report)
    assert _close(got, want), str(composed.fact_report)


@needs_engine_plan
def test_float32_attention_composes_with_the_3xtf32_kernel_in_strict(tmp_path):
    # A float32 model in strict (its default) plans the 3xTF32 kernel; on the CPU the host
    # reference computes the call, and the composed module stays within the strict bound of the
    # float64 model.
    module = load_model_file(CORPUS / "attention_causal_tril_buffer.py", {"N_EMBD": 128, "N_HEAD": 2})
    model, inputs = build(module, torch.float32)
    with torch.no_grad():
        composed = fact.compose.optimize(model, inputs, work_dir=tmp_path / "work", remainder="eager",
                                         speed_guard=False)
        got = composed(*inputs)
        want = copy.deepcopy(model).double()(*(x.double() for x in inputs))
    report = composed.fact_report
    attention = _attention_entries(report)
    assert len(attention) == 1 and attention[0].verified, str(report)
    assert attention[0].calls[0].kernel == "attn_f32_d64_causal_m64n64_3xtf32", str(report)
    assert _close(got, want, tolerance=1e-5), str(report)


@needs_engine_plan
def test_float32_attention_plans_the_tf32_kernel_in_tf32(tmp_path):
    # tf32 composes on a GPU only; its plan names the TF32 kernel (one product per multiply).
    module = load_model_file(CORPUS / "attention_causal_tril_buffer.py", {"N_EMBD": 128, "N_HEAD": 2})
    model, inputs = build(module, torch.float32)
    folder = fact.compose.plan(model, inputs, "tf32", work_dir=tmp_path / "work", compile_kernels=False)
    plan = json.loads((Path(folder) / "plan.json").read_text())
    attention = [r for r in plan["replacements"] if r["pattern"] == "attention"]
    assert len(attention) == 1, plan["replacements"]
    assert attention[0]["calls"][0]["config"] == "attn_f32_d64_causal_m64n64_tf32", attention[0]["calls"][0]


@needs_engine_plan
def test_float32_attention_in_a_native_run_is_left_to_pytorch_with_the_reason(tmp_path):
    module = load_model_file(CORPUS / "attention_causal_tril_buffer.py", {"N_EMBD": 128, "N_HEAD": 2})
    model, inputs = build(module, torch.float32)
    with torch.no_grad():
        composed = fact.compose.optimize(model, inputs, "native", work_dir=tmp_path / "work",
                                         remainder="eager", speed_guard=False)
        want, got = model(*inputs), composed(*inputs)
    left = [item for item in composed.fact_report.left_to_pytorch if "attention" in item.what]
    assert len(left) == 1 and "float32 attention in a 'native' run" in left[0].reason, str(composed.fact_report)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_engine_plan
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_gpt2_additive_mask_computed_in_the_graph_is_verified_on_its_value(tmp_path):
    # transformers builds an additive mask (0 / finfo.min) from arange comparisons; the engine
    # evaluates it as causal, and the check runs the original subgraph on that mask's value.
    module = load_model_file(CORPUS / "hf_gpt2_block.py", {"N_EMBD": 128})
    model, inputs = build(module)
    composed, want, got = _compose(model, inputs, tmp_path)
    attention = _attention_entries(composed.fact_report)
    assert len(attention) == 1 and attention[0].verified, str(composed.fact_report)
    assert not any("stay" in note and "attention" in note for note in composed.fact_report.notes)
    assert _close(got, want), str(composed.fact_report)


@needs_engine_plan
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
@pytest.mark.parametrize("name,sizes,window", [
    ("hf_phi3_decoder", {"HIDDEN_SIZE": 128, "NUM_HEADS": 2, "SEQ_LEN": 16, "SLIDING_WINDOW": 5}, 5),
    ("hf_mistral_decoder", {"HIDDEN_SIZE": 256, "NUM_HEADS": 4, "NUM_KV_HEADS": 2, "SEQ_LEN": 32,
                            "SLIDING_WINDOW": 9}, 9),
])
def test_sliding_window_attention_composes_with_its_window(name, sizes, window, tmp_path):
    # transformers' sliding-window mask (Phi-3, Mistral: query i sees keys i - w < j <= i) is read
    # as causal with a window; the call carries it, and the host reference computes it.
    model, inputs = build(load_model_file(CORPUS / f"{name}.py", sizes))
    composed, want, got = _compose(model, inputs, tmp_path)
    report = composed.fact_report
    attention = _attention_entries(report)
    assert len(attention) == 1 and attention[0].verified, str(report)
    assert attention[0].rule == "attention_causal", str(report)
    plan = json.loads((tmp_path / "work" / "plan.json").read_text())
    call = next(r for r in plan["replacements"] if r["pattern"] == "attention")["calls"][0]
    assert call["problem"]["window"] == window and call["problem"]["mask_kind"] == "causal_top_left", call["problem"]
    assert _close(got, want), str(report)


# --------------------------------------------------------------------------------------------
# GPU


def _gpu_attention_of(model, inputs, tmp_path):
    """fact.optimize on the GPU (no speed guard): the composed module matches the model, and its
    one attention replacement runs verified kernels; returns that replacement's report entry."""
    with torch.no_grad():
        composed = fact.compose.optimize(model, inputs, work_dir=tmp_path / "work", speed_guard=False)
        want, got = model(*inputs), composed(*inputs)
    attention = _attention_entries(composed.fact_report)
    assert len(attention) == 1 and attention[0].verified, str(composed.fact_report)
    assert attention[0].implementation == "kernels"
    assert _close(got, want)
    return attention[0]



@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU tests run on the device host)")
@needs_engine_plan
def test_mingpt_block_attention_kernel_through_optimize_on_the_gpu(tmp_path):
    module = load_model_file(REPO_ROOT / "bench/models/mingpt_block.py")
    torch.manual_seed(0)
    model = module.MinGPTBlock(768, 8, 512).to("cuda", torch.bfloat16).eval()
    inputs = (torch.randn(4, 512, 768, device="cuda", dtype=torch.bfloat16),)
    attention = _gpu_attention_of(model, inputs, tmp_path)
    assert attention.calls[0].kernel.startswith("attn_bf16_d96_causal")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU tests run on the device host)")
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
@needs_engine_plan
def test_phi3_sliding_window_attention_kernel_through_optimize_on_the_gpu(tmp_path):
    # transformers' Phi-3 layer with a window shorter than the sequence (head dim 96): the kernel
    # runs the window (the key blocks below it are never loaded), verified against PyTorch's
    # masked attention on fresh inputs, and the block matches the module.
    sizes = {"BATCH": 2, "SEQ_LEN": 512, "HIDDEN_SIZE": 768, "INTERMEDIATE_SIZE": 2048, "NUM_HEADS": 8,
             "SLIDING_WINDOW": 200, "MAX_POSITIONS": 1024}
    module = load_model_file(CORPUS / "hf_phi3_decoder.py", sizes)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to("cuda", torch.bfloat16).eval()
    inputs = tuple(module.get_inputs(dtype=torch.bfloat16, device="cuda"))
    attention = _gpu_attention_of(model, inputs, tmp_path)
    assert "w200" in attention.calls[0].summary, attention.calls[0].summary


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU tests run on the device host)")
@needs_engine_plan
def test_float32_mingpt_block_runs_the_3xtf32_attention_within_the_strict_bound_on_the_gpu(tmp_path):
    # The minGPT block in float32 (strict): attention in FACT's 3xTF32 flash attention, the block
    # within 1e-5 of the float64 module (the strict contract), on fresh inputs.
    module = load_model_file(REPO_ROOT / "bench/models/mingpt_block.py")
    torch.manual_seed(0)
    model = module.MinGPTBlock(768, 8, 512).to("cuda").eval()
    inputs = (torch.randn(4, 512, 768, device="cuda"),)
    with torch.no_grad():
        composed = fact.compose.optimize(model, inputs, work_dir=tmp_path / "work", speed_guard=False)
        fresh = (torch.randn(4, 512, 768, device="cuda"),)
        got = composed(*fresh)
        want = copy.deepcopy(model).double()(*(x.double() for x in fresh))
    attention = _attention_entries(composed.fact_report)
    assert len(attention) == 1 and attention[0].verified, str(composed.fact_report)
    assert attention[0].implementation == "kernels"
    assert attention[0].calls[0].kernel.startswith("attn_f32_d96_causal") and "3xtf32" in attention[0].calls[0].kernel
    assert _close(got, want, tolerance=1e-5), str(composed.fact_report)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU tests run on the device host)")
def test_attention_kernel_through_fact_run_kernel(tmp_path):
    engine = _engine_or_skip()
    graph = REPO_ROOT / "tests/data/graphs/mingpt_block_bf16.json"
    out = tmp_path / "kernels"
    subprocess.run([str(engine), "realize", str(graph), "-o", str(out), "--compile", "--no-tuning-db"],
                   check=True, capture_output=True, text=True)
    manifest = json.loads((out / "manifest.json").read_text())
    kernel = next(k for k in manifest["kernels"] if k["kind"] == "attention")
    assert kernel["status"] in ("built", "cached"), kernel
    call = next(c for c in manifest["calls"] if c["pattern"] == "attention")
    problem = tmp_path / "problem.json"
    problem.write_text(json.dumps(call["problem"]))
    report = tmp_path / "run.json"
    result = subprocess.run([str(engine), "run-kernel", "--lib", kernel["library"], "--problem-json", str(problem),
                             "--precision", "native", "--json", str(report)], capture_output=True, text=True)
    doc = json.loads(report.read_text())
    assert result.returncode == 0 and doc["status"] == "ok", result.stdout + result.stderr
    # The run report keeps its checks by name (src/runtime/run_report.cpp): every check ran and passed.
    assert set(doc["checks"]) == {"primary", "fresh_inputs", "other_stream", "repoison", "scale"}, doc["checks"]
    assert all(check["passed"] and check["inputs_unchanged"] for check in doc["checks"].values()), doc["checks"]
    assert doc["rel_err"] < 1e-2 and doc["ms"]["median"] > 0
