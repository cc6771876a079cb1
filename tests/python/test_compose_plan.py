"""Composition options and the plan/apply split on the CPU: pattern selection, the Inductor
remainder (and its fallback), plan.json applied again without the engine, the Python package
(written by fact.package and by the `fact optimize` CLI, loaded in a fresh interpreter), and
bad model files."""
import copy
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import fact
import fact.compose
import fact.package
from fact.graph_writer import CaptureError

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO_ROOT / "bench" / "models"))
from test_compose import BATCH, EMBED, SEQ_LEN, needs_engine, small_block  # noqa: E402

GEMM = torch.ops.fact.gemm_planned.default

TINY_MODEL = textwrap.dedent('''
    import torch


    class TinyMLP(torch.nn.Module):
        def __init__(self, width, hidden):
            super().__init__()
            self.fc1 = torch.nn.Linear(width, hidden)
            self.fc2 = torch.nn.Linear(hidden, width)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh")) + x


    def get_inputs(dtype=torch.float32, device="cpu"):
        return [torch.randn(4, 16, 64, dtype=dtype, device=device)]


    def get_init_inputs():
        return [64, 128]
''')


def _gemm_calls(composed) -> int:
    return sum(1 for n in composed.graph_module.graph.nodes if n.target == GEMM)


def _python_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "python"), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture
def tiny_model_file(tmp_path) -> Path:
    path = tmp_path / "tiny_mlp.py"
    path.write_text(TINY_MODEL)
    return path


# --- patterns ---------------------------------------------------------------------------------


@needs_engine
def test_patterns_select_by_rule_and_by_pattern_name(tmp_path):
    block = small_block()
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    by_rule = fact.optimize(block, (x,), patterns={"mlp_gelu_tanh"}, remainder="eager",
                            work_dir=tmp_path / "rule")
    report = by_rule.fact_report
    assert sorted(c.fusion for c in report.composed) == ["gemm_bias_gelu_tanh", "gemm_bias_residual"]
    assert {c.match for c in report.composed} == {"mlp_gelu_tanh"}
    not_selected = [i for i in report.left_to_pytorch if i.reason == "not selected (patterns=mlp_gelu_tanh)"]
    assert sorted(i.what.split(" at ")[0] for i in not_selected) == ["gemm_bias", "gemm_bias_residual"]
    assert _gemm_calls(by_rule) == 2

    by_pattern = fact.optimize(block, (x,), patterns=["gemm", "no_such_pattern"],
                               remainder="eager", work_dir=tmp_path / "pattern")
    report = by_pattern.fact_report
    assert sorted(c.match for c in report.composed) == ["gemm_bias", "gemm_bias_residual"]
    assert any("mlp_gelu_tanh" in i.what and i.reason.startswith("not selected (patterns=gemm, "
                                                                 "no_such_pattern)")
               for i in report.left_to_pytorch), str(report)
    assert any("'no_such_pattern' names no match" in note for note in report.notes)
    with torch.no_grad():
        fresh = torch.randn(BATCH, SEQ_LEN, EMBED)
        for composed in (by_rule, by_pattern):
            torch.testing.assert_close(composed(fresh), block(fresh), rtol=1e-5, atol=1e-5)


# --- remainder --------------------------------------------------------------------------------


class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 64)
        self.scale = 0.5

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x), approximate="tanh") * self.scale + 1.0


@needs_engine
def test_inductor_remainder_on_the_cpu(tmp_path):
    torch.manual_seed(0)
    module = LinearGelu().eval()
    x = torch.randn(16, 32)
    composed = fact.optimize(module, (x,), work_dir=tmp_path)  # remainder="inductor" by default
    report = composed.fact_report
    assert report.composed, str(report)
    assert report.remainder == "inductor", str(report)
    assert composed._compiled is not None
    assert "inductor" in json.loads((tmp_path / "report.json").read_text())["remainder"]
    assert not any(k.startswith("_compiled") for k in composed.state_dict())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in (1, 2):
            torch.manual_seed(seed)
            fresh = torch.randn(16, 32)
            torch.testing.assert_close(composed(fresh), module(fresh), rtol=1e-5, atol=1e-5)


@needs_engine
def test_inductor_failure_falls_back_to_eager_with_the_reason(tmp_path, monkeypatch):
    def broken_compile(*args, **kwargs):
        raise RuntimeError("no compiler for you\nsecond line")

    monkeypatch.setattr(torch, "compile", broken_compile)
    torch.manual_seed(0)
    module = LinearGelu().eval()
    x = torch.randn(16, 32)
    composed = fact.optimize(module, (x,), work_dir=tmp_path, remainder="inductor")
    assert composed.fact_report.remainder == \
        "eager (Inductor compilation failed: RuntimeError: no compiler for you)"
    assert composed._compiled is None and composed.fact_report.composed
    with torch.no_grad():
        torch.testing.assert_close(composed(x), module(x), rtol=1e-5, atol=1e-5)


def test_unknown_remainder_and_cuda_graphs_on_cpu_are_reported():
    with pytest.raises(ValueError, match="remainder"):
        fact.optimize(torch.nn.Linear(4, 4), (torch.ones(2, 4),), remainder="jit")


@needs_engine
def test_cuda_graphs_on_cpu_inputs_say_why_they_are_off(tmp_path):
    module = LinearGelu().eval()
    x = torch.randn(16, 32)
    composed = fact.optimize(module, (x,), work_dir=tmp_path, remainder="eager", cuda_graphs=True)
    assert composed.fact_report.cuda_graphs.startswith("off (asked for; CUDA graphs need CUDA inputs")
    assert composed.fact_report.op_implementation == "reference (float64 torch ops)"
    assert composed.fact_report.composed[0].rel_err is None  # verification runs on GPUs only


# --- plan / apply -----------------------------------------------------------------------------


@needs_engine
def test_plan_then_apply_on_another_instance_without_the_engine(tmp_path, monkeypatch):
    block = small_block()
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    folder = fact.compose.plan(block, (x,), "strict", work_dir=tmp_path)
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["schema"] == "fact.plan/1" and doc["status"] == "planned", doc.get("reason")
    assert doc["inputs"] == [{"shape": [BATCH, SEQ_LEN, EMBED], "dtype": "torch.float32"}]
    assert [m["rule"] for m in doc["matches"]].count("gemm_bias") == 1
    assert all("config_source" in g for g in doc["manifest"]["gemms"] if "kernel" in g)

    monkeypatch.setenv("FACT_ENGINE", str(tmp_path / "no-engine-here"))
    monkeypatch.setattr(fact.compose, "run_engine", None)  # applying must not call the engine
    twin = copy.deepcopy(block)
    composed = fact.compose.apply_plan(twin, (x,), folder, remainder="eager")
    assert len(composed.fact_report.composed) == 4, str(composed.fact_report)
    assert composed.original is twin
    torch.manual_seed(7)
    fresh = torch.randn(BATCH, SEQ_LEN, EMBED)
    with torch.no_grad():
        torch.testing.assert_close(composed(fresh), block(fresh), rtol=1e-5, atol=1e-5)

    narrowed = fact.compose.apply_plan(twin, (x,), folder / "plan.json", remainder="eager",
                                       patterns="gemm_bias")
    assert [c.fusion for c in narrowed.fact_report.composed] == ["gemm_bias"]

    other_shape = fact.compose.apply_plan(twin, (torch.randn(1, SEQ_LEN, EMBED),), folder,
                                          remainder="eager")
    assert other_shape.graph_module is None
    assert "differ from the plan's" in other_shape.fact_report.left_to_pytorch[0].reason


def test_plan_of_an_unexportable_module_records_the_reason(tmp_path):
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    folder = fact.compose.plan(DataDependent(), (torch.ones(4, 8),), work_dir=tmp_path)
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["status"] == "unplanned" and "cannot be exported" in doc["reason"]
    composed = fact.compose.apply_plan(DataDependent(), (torch.ones(4, 8),), folder)
    assert composed.graph_module is None
    assert "cannot be exported" in composed.fact_report.left_to_pytorch[0].reason


# --- the package ------------------------------------------------------------------------------

LOAD_IN_FRESH_INTERPRETER = textwrap.dedent('''
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import fact_tinymlp as package
    composed = package.load(device="cpu", remainder="eager")
    model, inputs = package.build_model("cpu")
    with torch.no_grad():
        out = composed(*inputs)
    calls = sum(1 for n in composed.graph_module.graph.nodes
                if n.target == torch.ops.fact.gemm_planned.default)
    torch.save({"inputs": inputs, "out": out, "calls": calls,
                "composed": len(composed.fact_report.composed)}, sys.argv[2])
''')


def _check_package(package_dir: Path, model_file: Path, tmp_path: Path) -> None:
    assert (package_dir / "__init__.py").is_file() and (package_dir / "plan.json").is_file()
    assert (package_dir / "state_dict.pt").is_file() and (package_dir / model_file.name).is_file()
    assert "load(device=" in (package_dir / "README.md").read_text()
    result_file = tmp_path / "loaded.pt"
    subprocess.run([sys.executable, "-c", LOAD_IN_FRESH_INTERPRETER, str(package_dir.parent),
                    str(result_file)], check=True, env=_python_env(), timeout=600)
    loaded = torch.load(result_file, weights_only=False)
    assert loaded["calls"] == 2 and loaded["composed"] == 2
    # The original module, built as the package builder did (seed 0): same weights, same result.
    torch.manual_seed(0)
    original, _ = fact.model_file.build_from_model_file(f"{model_file}:TinyMLP", None, "cpu")
    with torch.no_grad():
        want = original(*loaded["inputs"])
    torch.testing.assert_close(loaded["out"], want, rtol=1e-5, atol=1e-5)


@needs_engine
def test_package_written_by_fact_package_loads_in_a_fresh_interpreter(tmp_path, tiny_model_file):
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "fact.package", f"{tiny_model_file}:TinyMLP", "-o",
                    str(out), "--device", "cpu", "--no-compile"], check=True, env=_python_env(),
                   timeout=600)
    package_dir = out / "fact_tinymlp"
    meta = json.loads((package_dir / "package.json").read_text())
    assert meta["class_name"] == "TinyMLP" and meta["verified"] is False
    assert meta["planned_on"] == "cpu" and meta["precision"] == "strict"
    assert "not verified" in json.dumps(json.loads((package_dir / "report.json").read_text()))
    _check_package(package_dir, tiny_model_file, tmp_path)


def _engine_writes_packages() -> bool:
    from fact._engine import engine_path
    try:
        help_text = subprocess.run([str(engine_path()), "optimize", "--help"], capture_output=True,
                                   text=True, timeout=60).stdout
    except Exception:  # noqa: BLE001
        return False
    return "--package-name" in help_text


@needs_engine
def test_fact_optimize_cli_writes_the_package(tmp_path, tiny_model_file):
    if not _engine_writes_packages():
        pytest.skip("the engine found was built before `fact optimize` wrote packages")
    from fact._engine import engine_path

    out = tmp_path / "optimized"
    env = _python_env()
    env["FACT_PYTHON"] = sys.executable
    env.pop("FACT_ENGINE", None)  # the CLI must hand its own path to the Python it runs
    proc = subprocess.run([str(engine_path()), "optimize", f"{tiny_model_file}:TinyMLP", "-o",
                           str(out), "--no-compile", "--no-tune", "--package-name", "fact_tinymlp"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert "## Composed module (Python package)" in report and "import fact_tinymlp" in report
    assert json.loads((out / "report.json").read_text())["package"]["written"] is True
    _check_package(out / "fact_tinymlp", tiny_model_file, tmp_path)


def test_model_file_without_get_inputs_is_refused_clearly(tmp_path):
    model_file = tmp_path / "no_inputs.py"
    model_file.write_text(TINY_MODEL.replace("def get_inputs(", "def make_inputs("))
    proc = subprocess.run([sys.executable, "-m", "fact.package", f"{model_file}:TinyMLP", "-o",
                           str(tmp_path / "out"), "--device", "cpu"], capture_output=True,
                          text=True, env=_python_env(), timeout=300)
    assert proc.returncode == 1
    assert f"fact.package: error: model file {model_file} defines no get_inputs()" in proc.stderr
    with pytest.raises(CaptureError, match="defines no get_inputs"):
        fact.package.write_package(tmp_path / "out", model_file, "TinyMLP", tmp_path)
    with pytest.raises(CaptureError, match="no torch.nn.Module class Missing"):
        fact.package.write_package(tmp_path / "out", tmp_path / "no_inputs.py", "Missing", tmp_path)
