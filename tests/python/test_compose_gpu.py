"""Composition on a Hopper GPU: kernels verified against float64 inside optimize (and a
verification failure leaving the match to PyTorch), tuning before realize (the stored choice
is what realize builds), the Inductor remainder, CUDA-graph capture, and a package written
on the GPU loaded back. Skipped without a CUDA GPU."""
import copy
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fact
import fact.compose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_compose import needs_engine  # noqa: E402
from test_compose_plan import TINY_MODEL, _python_env  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (GPU tests run on the device host)"),
    needs_engine,
]

GEMM = torch.ops.fact.gemm_planned.default


class Mlp(torch.nn.Module):
    """Up-projection + GELU(tanh) + down-projection + residual: discovery's mlp_gelu_tanh."""

    def __init__(self, width=256, hidden=1024):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh")) + x


def _bf16_mlp():
    torch.manual_seed(0)
    return Mlp().to("cuda", torch.bfloat16).eval()


def _inputs(seed):
    torch.manual_seed(seed)
    return torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16)


def _assert_close_to_float64(composed, module, x):
    """Error against the float64 module no worse than PyTorch's own bf16 error (with slack).
    (A copy goes to float64: converting `module` itself would move the weights the composed
    graph and its CUDA graph read.)"""
    with torch.no_grad():
        exact = copy.deepcopy(module).double()(x.double())
        got = composed(x)
        want = module(x)
    fact_error = (got.double() - exact).norm() / exact.norm()
    torch_error = (want.double() - exact).norm() / exact.norm()
    assert fact_error <= 1.5 * torch_error + 1e-3, (fact_error.item(), torch_error.item())


@pytest.fixture(scope="module")
def composed_mlp(tmp_path_factory):
    module = _bf16_mlp()
    composed = fact.optimize(module, (_inputs(0),), precision="native", remainder="eager",
                             work_dir=tmp_path_factory.mktemp("gpu_mlp"))
    return module, composed


def test_every_composed_gemm_calls_a_verified_kernel(composed_mlp):
    module, composed = composed_mlp
    report = composed.fact_report
    assert len(report.composed) == 2, str(report)
    for gemm in report.composed:
        assert gemm.implementation.startswith("kernel "), str(report)
        assert gemm.rel_err is not None and gemm.rel_err <= gemm.tolerance == 2e-2, str(report)
        assert gemm.config and gemm.config_source in ("default", "database"), str(report)
    assert report.op_implementation and "reference" not in report.op_implementation
    calls = [n for n in composed.graph_module.graph.nodes if n.target == GEMM]
    assert len(calls) == 2 and all(fact.ops.planned_arguments(n.args[-1])[-2] >= 0 for n in calls)  # kernel handles
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, no 'cannot implement'
        _assert_close_to_float64(composed, module, _inputs(1))


def test_a_kernel_failing_verification_leaves_its_match_to_pytorch(tmp_path, monkeypatch):
    monkeypatch.setattr(fact.compose, "_manifest_tolerance", lambda entry: 0.0)
    module = _bf16_mlp()
    composed = fact.optimize(module, (_inputs(0),), precision="native", remainder="eager",
                             work_dir=tmp_path)
    assert composed.graph_module is None and not composed.fact_report.composed
    [item] = [i for i in composed.fact_report.left_to_pytorch if "mlp" in i.what]
    assert "verification failed: relative error" in item.reason and "tolerance 0e+00" in item.reason
    report = json.loads((tmp_path / "report.json").read_text())
    assert "verification failed" in json.dumps(report["left_to_pytorch"])
    x = _inputs(2)
    with torch.no_grad():
        assert torch.equal(composed(x), module(x))


def test_inductor_remainder_and_cuda_graphs(tmp_path):
    module = _bf16_mlp()
    composed = fact.optimize(module, (_inputs(0),), precision="native", work_dir=tmp_path,
                             remainder="inductor", cuda_graphs=True)
    report = composed.fact_report
    assert report.remainder == "inductor", str(report)
    assert report.cuda_graphs == "on", str(report)
    assert composed._cuda_graph is not None
    x1, x2 = _inputs(3), _inputs(4)
    with torch.no_grad():
        y1 = composed(x1)
        y2 = composed(x2)
        eager1 = fact.compose.ComposedModule(module, composed.graph_module,
                                             composed.planned_signature, report)(x1)
    torch.testing.assert_close(y1, eager1, rtol=2e-2, atol=2e-2)  # the replay, not stale data
    assert not torch.equal(y1, y2)  # the second replay did not overwrite the first result
    _assert_close_to_float64(composed, module, _inputs(5))
    other = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        assert torch.equal(composed(other), module(other))
    assert any("running the original module" in str(w.message) for w in caught)


def test_tune_stores_a_choice_that_realize_then_builds(tmp_path):
    module = _bf16_mlp()
    composed = fact.optimize(module, (_inputs(0),), precision="native", remainder="eager",
                             tune=2, work_dir=tmp_path)
    report = composed.fact_report
    assert len(report.composed) == 2, str(report)
    plan = json.loads((tmp_path / "plan.json").read_text())
    for gemm in report.composed:
        assert gemm.config_source == "database", str(report)
        assert gemm.tune_seconds is not None and gemm.tune_seconds > 0, str(report)
        assert gemm.rel_err is not None and gemm.rel_err <= gemm.tolerance
    tuned = {v["config"] for k, v in plan["tuning"].items() if not k.startswith("_")}
    assert {g.config for g in report.composed} <= tuned, (tuned, str(report))
    _assert_close_to_float64(composed, module, _inputs(6))


def test_package_written_on_the_gpu_loads_verified(tmp_path):
    model_file = tmp_path / "tiny_mlp.py"
    model_file.write_text(TINY_MODEL)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "fact.package", f"{model_file}:TinyMLP", "-o", str(out),
                    "--device", "cuda", "--dtype", "bfloat16"], check=True, env=_python_env(),
                   timeout=1800)
    package_dir = out / "fact_tinymlp"
    meta = json.loads((package_dir / "package.json").read_text())
    assert meta["verified"] is True and meta["compiled"] is True and meta["precision"] == "native"
    assert list((package_dir / "kernels").glob("*.so"))
    sys.path.insert(0, str(out))
    try:
        import fact_tinymlp
        composed = fact_tinymlp.load(device="cuda", remainder="eager", cuda_graphs=True)
        model, inputs = fact_tinymlp.build_model("cuda")
    finally:
        sys.path.remove(str(out))
    report = composed.fact_report
    assert len(report.composed) == 2 and report.cuda_graphs == "on", str(report)
    assert all(g.implementation.startswith("kernel ") and g.rel_err is not None
               for g in report.composed), str(report)
    with torch.no_grad():
        torch.testing.assert_close(composed(*inputs), model(*inputs), rtol=5e-2, atol=5e-2)
