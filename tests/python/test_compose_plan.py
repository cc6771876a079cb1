"""The plan/apply split and the Python package on the CPU: `python -m fact.package --plan`
packaging a plan (written here for the fake kind, tests/python/fake_kind.py) and the package
loaded in a fresh interpreter; replacements that fail verification when packaged stay PyTorch in
the package; the planning entry point (plan() then package) without the engine library;
plan() of an unexportable module; bad model files. Tests of plan() with the engine in process
are skipped until the engine library exports fact_engine_plan."""
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fact
import fact.compose
import fact.package
import fake_kind
from fact.graph_writer import CaptureError

REPO_ROOT = Path(__file__).resolve().parents[2]

ENGINE_CAN_PLAN, ENGINE_WHY_NOT = fact.compose.engine_can_plan()
needs_engine_plan = pytest.mark.skipif(
    not ENGINE_CAN_PLAN, reason=f"the engine's in-process planning is not available: {ENGINE_WHY_NOT}")

# A GEMM-family model file (used by the engine and GPU tests).
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

# A model file whose replacements the fake kind computes.
AXPBY_MODEL = textwrap.dedent('''
    import torch


    class AxpbyModel(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, width))

        def forward(self, x, z):
            y = 2.0 * x + 3.0 * z            # mul, mul_1, add
            w = 0.5 * y + -1.0 * self.weight  # mul_2, mul_3, add_1
            return torch.tanh(w) + y


    def get_inputs(dtype=torch.float32, device="cpu"):
        return [torch.randn(4, 8, dtype=dtype, device=device),
                torch.randn(4, 8, dtype=dtype, device=device)]


    def get_init_inputs():
        return [8]
''')


def _python_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "python"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


@pytest.fixture
def axpby_model_file(tmp_path) -> Path:
    path = tmp_path / "axpby_model.py"
    path.write_text(AXPBY_MODEL)
    return path


def _axpby_plan(folder: Path, corrupt_second: bool = False) -> Path:
    shape = [4, 8]
    first = fake_kind.replacement(0, ["mul", "mul_1", "add"], ["x", "z"], ["add"],
                                  [fake_kind.axpby_call("0", "x", "z", "add", shape, 2.0, 3.0)])
    call = fake_kind.axpby_call("1", "add", "p_weight", "add_1", shape, 0.5, -1.0)
    if corrupt_second:
        image = bytearray.fromhex(call["args"]["hex"])
        struct.pack_into("<d", image, 40, -2.0)  # b: -1 in the description, -2 in the image
        call["args"]["hex"] = image.hex()
    second = fake_kind.replacement(
        1, ["mul_2", "mul_3", "add_1"],
        ["add", {"value": "p_weight", "kind": "parameter", "target": "weight"}], ["add_1"], [call])
    inputs = (torch.empty(4, 8), torch.empty(4, 8))
    return fake_kind.write_plan(folder, inputs, [first, second])


LOAD_IN_FRESH_INTERPRETER = textwrap.dedent('''
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import fact_axpbymodel as package
    verify = sys.argv[3] == "verify"
    composed = package.load(device="cpu", remainder="eager", verify=verify)
    model, inputs = package.build_model("cpu")
    with torch.no_grad():
        out, want = composed(*inputs), model(*inputs)
    calls = sum(1 for n in composed.graph_module.graph.nodes
                if n.target is torch.ops.fact.launch.default)
    torch.save({"out": out, "want": want, "calls": calls,
                "composed": [c.label for c in composed.fact_report.composed],
                "left": {i.what: i.reason for i in composed.fact_report.left_to_pytorch}}, sys.argv[2])
''')


def _load_fresh(package_dir: Path, tmp_path: Path, library: Path, verify: bool = True) -> dict:
    result_file = tmp_path / "loaded.pt"
    subprocess.run([sys.executable, "-c", LOAD_IN_FRESH_INTERPRETER, str(package_dir.parent),
                    str(result_file), "verify" if verify else "no-verify"], check=True,
                   env=_python_env(FACT_REFERENCE_LIBRARY=str(library)), timeout=600)
    return torch.load(result_file, weights_only=False)


# --- python -m fact.package --plan --------------------------------------------------------------


def test_package_of_an_existing_plan_round_trips_in_a_fresh_interpreter(tmp_path, axpby_model_file,
                                                                         fake_kind_library):
    plan_dir = _axpby_plan(tmp_path / "plan")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "fact.package", "--plan", str(plan_dir),
                           f"{axpby_model_file}:AxpbyModel", "-o", str(out), "--device", "cpu"],
                          capture_output=True, text=True, timeout=600,
                          env=_python_env(FACT_REFERENCE_LIBRARY=str(fake_kind_library)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    package_dir = out / "fact_axpbymodel"
    meta = json.loads((package_dir / "package.json").read_text())
    assert meta["class_name"] == "AxpbyModel" and meta["verified"] is False
    assert meta["planned_on"] == "cpu" and meta["precision"] == "strict"
    report = json.loads((package_dir / "report.json").read_text())
    assert [c["label"] for c in report["composed"]] == ["0", "1"]
    assert all(c["verified"] for c in report["composed"])
    packaged = json.loads((package_dir / "plan.json").read_text())
    assert [r["status"] for r in packaged["replacements"]] == ["planned", "planned"]
    assert (package_dir / "state_dict.pt").is_file() and (package_dir / axpby_model_file.name).is_file()
    assert "load(device=" in (package_dir / "README.md").read_text()

    loaded = _load_fresh(package_dir, tmp_path, fake_kind_library)
    assert loaded["calls"] == 2 and loaded["composed"] == ["0", "1"]
    torch.testing.assert_close(loaded["out"], loaded["want"], rtol=1e-6, atol=1e-6)
    # the packaged weights are the ones the package was written with (seed 0)
    torch.manual_seed(0)
    original, _ = fact.model_file.build_from_model_file(f"{axpby_model_file}:AxpbyModel", None, "cpu")
    state = torch.load(package_dir / "state_dict.pt", weights_only=True)
    assert torch.equal(state["weight"], original.weight.detach())


def test_a_replacement_failing_verification_when_packaged_stays_pytorch(tmp_path, axpby_model_file,
                                                                        fake_kind_library, monkeypatch):
    monkeypatch.setenv("FACT_REFERENCE_LIBRARY", str(fake_kind_library))
    plan_dir = _axpby_plan(tmp_path / "plan", corrupt_second=True)
    reports = []
    target = fact.package.package_plan(f"{axpby_model_file}:AxpbyModel", plan_dir, tmp_path / "out",
                                       device="cpu", log=lambda text: None, on_report=reports.append)
    # The composition report, as `fact optimize` hands it to its report's "Left to PyTorch".
    [report] = reports
    [left] = report.to_json()["left_to_pytorch"]
    assert left["stage"] == "verify" and left["reason"].startswith("verification failed: output add_1")
    assert left["what"].startswith("1 axpby_rule") and left["subgraph_ms"] is None
    packaged = json.loads((target / "plan.json").read_text())
    first, second = packaged["replacements"]
    assert first["status"] == "planned"
    assert second["status"] == "failed"
    assert second["reason"].startswith("rejected when packaged on cpu: verification failed: "
                                       "output add_1: rel_err ")
    loaded = _load_fresh(target, tmp_path, fake_kind_library, verify=False)
    assert loaded["composed"] == ["0"] and loaded["calls"] == 1
    [(what, reason)] = loaded["left"].items()
    assert what.startswith("1 axpby_rule") and reason.startswith("failed: rejected when packaged")
    torch.testing.assert_close(loaded["out"], loaded["want"], rtol=1e-6, atol=1e-6)


def test_package_of_a_missing_plan_or_a_bad_model_file_is_refused_clearly(tmp_path, axpby_model_file):
    done = subprocess.run([sys.executable, "-m", "fact.package", "--plan", str(tmp_path / "none"),
                           f"{axpby_model_file}:AxpbyModel", "-o", str(tmp_path / "out"),
                           "--device", "cpu"], capture_output=True, text=True, env=_python_env(),
                          timeout=300)
    assert done.returncode == 1 and "fact.package: error:" in done.stderr
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


def test_the_planning_entry_point_still_writes_a_package_and_says_why(tmp_path, axpby_model_file):
    """Without --plan: plan() (the engine in process), then the same packaging. Without an
    engine library the plan is 'unplanned' with the reason and the package runs the original."""
    if ENGINE_CAN_PLAN:
        pytest.skip("an engine that can plan is available here (test_compose.py covers it)")
    out = tmp_path / "out"
    env = _python_env(FACT_ENGINE_LIBRARY=str(tmp_path / "no-libfact.so"))
    done = subprocess.run([sys.executable, "-m", "fact.package", f"{axpby_model_file}:AxpbyModel",
                           "-o", str(out), "--device", "cpu"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "plan" / "plan.json").read_text())
    assert doc["schema"] == "fact.plan/2" and doc["status"] == "unplanned"
    assert "FACT engine library not found" in doc["reason"]
    packaged = json.loads((out / "fact_axpbymodel" / "report.json").read_text())
    assert packaged["left_to_pytorch"][0]["reason"] == doc["reason"]


# --- plan() -------------------------------------------------------------------------------------


def test_plan_of_an_unexportable_module_records_the_reason(tmp_path):
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    folder = fact.compose.plan(DataDependent(), (torch.ones(4, 8),), work_dir=tmp_path)
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["schema"] == "fact.plan/2"
    assert doc["status"] == "unplanned" and "cannot be exported" in doc["reason"]
    composed = fact.compose.apply_plan(DataDependent(), (torch.ones(4, 8),), folder, remainder="eager")
    assert composed.graph_module is None
    assert "cannot be exported" in composed.fact_report.left_to_pytorch[0].reason


def test_plan_without_the_engine_library_writes_an_unplanned_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("FACT_ENGINE_LIBRARY", str(tmp_path / "missing-libfact.so"))
    monkeypatch.setenv("FACT_ENGINE", str(tmp_path / "missing-fact"))
    folder = fact.compose.plan(torch.nn.Linear(8, 4), (torch.randn(2, 8),), work_dir=tmp_path)
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["status"] == "unplanned" and doc["capture"] == "torch.export"
    assert doc["reason"].startswith("FACT engine library not found (tried: $FACT_ENGINE_LIBRARY=")
    assert (tmp_path / "graph.json").is_file()  # captured before the engine was looked for


def test_plan_calls_the_engine_library_in_process(tmp_path, monkeypatch):
    """fact_engine_plan through ctypes: the request in, the response out and freed, the plan the
    engine wrote read back (a stand-in library, tests/python/data/fake_engine.c)."""
    library = fake_kind.build_library(tmp_path / "engine", fake_kind.DATA / "fake_engine.c")
    monkeypatch.setenv("FACT_ENGINE_LIBRARY", str(library))
    engine = fact.compose._engine.engine_library()
    assert engine.version() == "0.0.0 fake" and fact.compose.engine_can_plan() == (True, "")
    folder = fact.compose.plan(torch.nn.Linear(8, 4), (torch.randn(2, 8),), "strict",
                               work_dir=tmp_path / "planned")
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["reason"] == "fake engine: planned nothing" and doc["precision"] == "strict"
    refused = fact.compose.plan(torch.nn.Linear(8, 4), (torch.randn(2, 8),), "tf32",
                                work_dir=tmp_path / "refused")
    doc = json.loads((refused / "plan.json").read_text())
    assert doc["status"] == "unplanned"
    assert doc["reason"] == "the engine wrote no plan: fake engine: no tf32 here"


@needs_engine_plan
def test_plan_then_apply_on_another_instance_without_the_engine(tmp_path, monkeypatch):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(approximate="tanh"),
                                 torch.nn.Linear(128, 64)).eval()
    x = torch.randn(4, 16, 64)
    folder = fact.compose.plan(module, (x,), "strict", work_dir=tmp_path)
    doc = json.loads((folder / "plan.json").read_text())
    assert doc["schema"] == "fact.plan/2" and doc["status"] == "planned", doc.get("reason")
    assert doc["inputs"] == [{"shape": [4, 16, 64], "dtype": "torch.float32"}]
    # On the CPU the kernels are the engine's float64 host reference (fact_reference_call): keep
    # that library, take the planner away -- applying must not plan.
    monkeypatch.setenv("FACT_REFERENCE_LIBRARY", str(fact.compose._engine.engine_library_path()))
    monkeypatch.setenv("FACT_ENGINE_LIBRARY", str(tmp_path / "gone.so"))
    monkeypatch.setattr(fact.compose._engine, "engine_library", None)
    import copy
    twin = copy.deepcopy(module)
    composed = fact.compose.apply_plan(twin, (x,), folder, remainder="eager")
    assert composed.fact_report.composed, str(composed.fact_report)
    assert composed.original is twin
    fresh = torch.randn(4, 16, 64)
    with torch.no_grad():
        torch.testing.assert_close(composed(fresh), module(fresh), rtol=1e-5, atol=1e-5)


@needs_engine_plan
def test_package_written_by_the_planning_entry_point_loads(tmp_path):
    model_file = tmp_path / "tiny_mlp.py"
    model_file.write_text(TINY_MODEL)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "fact.package", f"{model_file}:TinyMLP", "-o", str(out),
                    "--device", "cpu", "--no-compile"], check=True, env=_python_env(), timeout=600)
    report = json.loads((out / "fact_tinymlp" / "report.json").read_text())
    assert report["composed"], report
