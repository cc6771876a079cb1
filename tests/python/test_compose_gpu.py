"""Composition on a CUDA GPU (skipped elsewhere).

Without the engine: the fake "axpby" kind as a CUDA kernel library (tests/python/data/
fake_kind_cuda.cu, built here with nvcc) and plans written by the test drive fact::launch's
CUDA implementations: the native C++ one (src/torch_ext/fact_launch_op.cpp) and the ctypes
fallback (FACT_NATIVE=0), verification on the GPU (a kernel writing half its output, a
corrupted argument image), the Inductor remainder, CUDA-graph capture and the never-slower
check. With the engine (in process; skipped until it exports fact_engine_plan): real GEMM
plans on a Hopper GPU, epilogue chains, x @ W there, and a package written and loaded on the GPU."""
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import fact
import fact.compose
import fake_kind
from fact import native
from test_compose_plan import TINY_MODEL, _python_env, needs_engine_plan

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (GPU tests run on the device host)"),
]

LAUNCH = torch.ops.fact.launch.default
SHAPE = [64, 96]
NVCC = shutil.which("nvcc") or (str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
                                if (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc").is_file()
                                else None)


@pytest.fixture(scope="module")
def cuda_kind_library(tmp_path_factory) -> Path:
    if NVCC is None:
        pytest.skip("no nvcc to build the fake kind's CUDA kernel library")
    folder = tmp_path_factory.mktemp("fake_kind_cuda")
    path = folder / "libfake_kind_cuda.so"
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-arch=native",
                    "-I", str(fake_kind.REPO_ROOT / "include"),
                    str(fake_kind.DATA / "fake_kind_cuda.cu"), "-o", str(path)], check=True)
    return path


class Chain(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        w = 0.5 * y + -1.0 * z
        return torch.relu(w) + y


def _inputs(seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(SHAPE, device="cuda", generator=generator),
            torch.randn(SHAPE, device="cuda", generator=generator))


def _plan(folder: Path, library: Path, *, first_kind="axpby", corrupt_second=False) -> Path:
    kernels = {"axpbykey": {"name": "axpby_cuda", "kind": "axpby", "pattern": "axpby",
                            "entry": "fact_axpby_cuda", "library": str(library), "status": "built",
                            "reason": ""}}
    first = fake_kind.axpby_call("0", "x", "z", "add", SHAPE, 2.0, 3.0, kind=first_kind,
                                 kernel="axpbykey")
    second = fake_kind.axpby_call("1", "add", "z", "add_1", SHAPE, 0.5, -1.0, kernel="axpbykey")
    if corrupt_second:
        image = bytearray.fromhex(second["args"]["hex"])
        struct.pack_into("<d", image, 32, 0.75)
        second["args"]["hex"] = image.hex()
    replacements = [
        fake_kind.replacement(1, ["mul_2", "mul_3", "add_1"], ["add", "z"], ["add_1"], [second]),
        fake_kind.replacement(0, ["mul", "mul_1", "add"], ["x", "z"], ["add"], [first]),
    ]
    return fake_kind.write_plan(folder, _inputs(), replacements, device="cuda", kernels=kernels)


def _assert_same(composed, module, seeds=(1, 2)):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in seeds:
            x, z = _inputs(seed)
            torch.testing.assert_close(composed(x, z), module(x, z), rtol=1e-6, atol=1e-5)


class WritesItsInput(torch.nn.Module):
    """Chain's two replacements, then an in-place write to its input."""

    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        w = 0.5 * y + -1.0 * z
        x.view(-1).add_(1.0)
        return torch.relu(w) + y


def test_by_default_a_launch_bound_signature_runs_as_a_cuda_graph(tmp_path, cuda_kind_library):
    """cuda_graphs=None (the default): the planned signature is captured on its third call when
    its second was bound by the host's launches (this tiny chain is); later calls replay with
    fresh inputs copied in, and the outputs are copies a later call never overwrites."""
    module = Chain()
    composed = fact.compose.apply_plan(module, _inputs(), _plan(tmp_path / "plan", cuda_kind_library),
                                       remainder="eager")
    report = composed.fact_report
    assert report.composed and composed._shape_graphs is not None, str(report)
    kept = []
    with torch.no_grad():
        for seed in range(4, 10):
            x, z = _inputs(seed)
            kept.append((composed(x, z), module(x, z)))
    assert composed._shape_graphs.captured == 1 and () in composed._shape_graphs.graphs, report.cuda_graphs
    assert report.cuda_graphs.startswith("on,") and "1 captured" in report.cuda_graphs, report.cuda_graphs
    for got, want in kept:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    off = fact.compose.apply_plan(module, _inputs(), _plan(tmp_path / "off", cuda_kind_library),
                                  remainder="eager", cuda_graphs=False)
    assert off._shape_graphs is None and off.fact_report.cuda_graphs == "off", off.fact_report.cuda_graphs


def test_a_forward_that_writes_its_input_gets_no_cuda_graph(tmp_path, cuda_kind_library):
    module = WritesItsInput()
    composed = fact.compose.apply_plan(module, _inputs(), _plan(tmp_path / "plan", cuda_kind_library),
                                       remainder="eager")
    report = composed.fact_report
    assert report.composed and composed._shape_graphs is None, str(report)
    assert report.cuda_graphs.startswith("off (the forward writes its input(s) x"), report.cuda_graphs
    with torch.no_grad():
        for seed in (11, 12, 13):
            x, z = _inputs(seed)
            x_twin = x.clone()
            got = composed(x, z)
            want = module(x_twin, z)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
            torch.testing.assert_close(x, x_twin)  # the caller's input was written, as eagerly


def test_the_native_op_runs_verified_kernels_with_inductor_and_cuda_graphs(tmp_path, cuda_kind_library):
    module = Chain()
    composed = fact.compose.apply_plan(module, _inputs(), _plan(tmp_path / "plan", cuda_kind_library),
                                       remainder="inductor", cuda_graphs=True)
    report = composed.fact_report
    assert sorted(c.label for c in report.composed) == ["0", "1"], str(report)
    for entry in report.composed:
        assert entry.implementation == "kernels" and entry.verified, str(report)
        assert entry.rel_err <= entry.tolerance == 1e-6
        assert entry.calls[0].kernel == "axpby_cuda"
        assert entry.calls_ms > 0 and entry.subgraph_ms > 0  # replacement_guard None follows speed_guard=True
    if os.environ.get("FACT_NATIVE", "1") != "0":
        assert native.active() and report.op_implementation.startswith("native C++"), report.op_implementation
        assert str(cuda_kind_library.resolve()) in native.registered_libraries()
    assert report.remainder == "inductor" and report.cuda_graphs == "on", str(report)
    assert report.speed is not None and report.speed["composed_ms"] > 0 and report.speed["original_ms"] > 0
    assert report.runs, str(report)
    _assert_same(composed, module)
    x, z = _inputs(3)
    with torch.no_grad():  # the composed graph itself (no fallback, no CUDA graph)
        torch.testing.assert_close(composed._run_composed((x, z)), module(x, z), rtol=1e-6, atol=1e-5)


def test_verification_on_the_gpu_refuses_wrong_replacements(tmp_path, cuda_kind_library):
    module = Chain()
    plan = _plan(tmp_path / "plan", cuda_kind_library, first_kind="axpby_half", corrupt_second=True)
    composed = fact.compose.apply_plan(module, _inputs(), plan, remainder="eager", speed_guard=False)
    reasons = {i.what.split()[0]: i.reason for i in composed.fact_report.left_to_pytorch}
    assert reasons["0"] == ("verification failed: output add: 3072 of 6144 elements not written "
                            "(still NaN after the call)")
    assert reasons["1"].startswith("verification failed: output add_1: rel_err ")
    assert composed.graph_module is None
    _assert_same(composed, module, seeds=(1,))


def test_fact_launch_is_captured_into_a_cuda_graph(tmp_path, cuda_kind_library):
    call = fake_kind.axpby_call("g", "x", "z", "y", SHAPE, 2.0, -1.0, w="w", kernel="k")
    number = fact.ops.register_call(call, cuda_kind_library, entry="fact_axpby_cuda")
    x, z = _inputs(4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        LAUNCH([x, z], number)  # warm-up (workspace size query)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, w = LAUNCH([x, z], number)
    fresh_x, fresh_z = _inputs(5)
    x.copy_(fresh_x)
    z.copy_(fresh_z)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2.0 * fresh_x - fresh_z)
    torch.testing.assert_close(w, fresh_x * fresh_z)


CTYPES_CHECK = textwrap.dedent('''
    import json, sys, torch
    sys.path.insert(0, sys.argv[3])
    import fact.compose, fact.ops
    from test_compose_gpu import Chain, _inputs, _plan
    from pathlib import Path
    module = Chain()
    composed = fact.compose.apply_plan(module, _inputs(), _plan(Path(sys.argv[1]), Path(sys.argv[2])),
                                       remainder="eager", speed_guard=False)
    x, z = _inputs(7)
    with torch.no_grad():
        error = (composed(x, z) - module(x, z)).abs().max().item()
    print("RESULT " + json.dumps({"composed": len(composed.fact_report.composed),
                                  "implementation": composed.fact_report.op_implementation,
                                  "error": error}))
''')


def test_the_ctypes_fallback_runs_the_same_plan(tmp_path, cuda_kind_library):
    env = _python_env(FACT_NATIVE="0")
    tests = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join([tests, env["PYTHONPATH"]])
    run = subprocess.run([sys.executable, "-c", CTYPES_CHECK, str(tmp_path / "plan"),
                          str(cuda_kind_library), tests], capture_output=True, text=True,
                         env=env, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["composed"] == 2 and result["error"] < 1e-5, result
    assert result["implementation"].startswith("Python ctypes"), result


# --- with the engine ------------------------------------------------------------------------------


class Mlp(torch.nn.Module):
    def __init__(self, width=256, hidden=1024):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, hidden)
        self.fc2 = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh")) + x


def _bf16_input(seed):
    torch.manual_seed(seed)
    return torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16)


@needs_engine_plan
def test_every_replacement_of_a_bf16_mlp_runs_a_verified_kernel(tmp_path):
    torch.manual_seed(0)
    module = Mlp().to("cuda", torch.bfloat16).eval()
    composed = fact.optimize(module, (_bf16_input(0),), "native", remainder="eager",
                             work_dir=tmp_path, speed_guard=False)
    report = composed.fact_report
    assert report.composed, str(report)
    for entry in report.composed:
        assert entry.implementation == "kernels" and entry.verified, str(report)
        assert entry.rel_err <= entry.tolerance, str(report)
        assert all(call.config and call.kernel for call in entry.calls), str(report)
    assert report.op_implementation.startswith(("native C++", "Python ctypes"))
    x = _bf16_input(1)
    with torch.no_grad():
        got, want = composed(x), module(x)
    assert ((got.double() - want.double()).norm() / want.double().norm()).item() < 2e-2


class ScaledHardtanhGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(256, 512)

    def forward(self, x):
        return torch.nn.functional.gelu(torch.nn.functional.hardtanh(self.linear(x) * 0.5, -2.0, 2.0))


class RowMajorWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(256, 512) / 16)

    def forward(self, x):
        return x @ self.weight


@needs_engine_plan
@pytest.mark.parametrize("module_class,precision", [(ScaledHardtanhGelu, "strict"),
                                                    (ScaledHardtanhGelu, "tf32"),
                                                    (RowMajorWeight, "tf32")])
def test_epilogue_chains_and_row_major_b_compose_on_the_gpu(tmp_path, module_class, precision):
    """A scale after another step (once refused on the GPU) and TF32 with
    a row-major B was refused): both must compose, verified."""
    torch.manual_seed(0)
    module = module_class().cuda().eval()
    x = torch.randn(128, 256, device="cuda") * 4
    composed = fact.optimize(module, (x,), precision, remainder="eager", work_dir=tmp_path,
                             speed_guard=False)
    report = composed.fact_report
    assert report.composed and all(c.verified for c in report.composed), str(report)
    with torch.no_grad():
        got, want = composed(x), module(x)
    assert ((got - want).norm() / want.norm()).item() < (1e-5 if precision == "strict" else 5e-3)


@needs_engine_plan
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
        # replacement_guard off: this test is about loading verified kernels; whether a GEMM
        # this small beats cuBLAS is test_replacement_speed's question, not this one's.
        composed = fact_tinymlp.load(device="cuda", remainder="eager", cuda_graphs=True,
                                     replacement_guard=False)
        model, inputs = fact_tinymlp.build_model("cuda")
    finally:
        sys.path.remove(str(out))
    report = composed.fact_report
    assert report.composed and report.cuda_graphs == "on", str(report)
    assert all(c.implementation == "kernels" and c.verified for c in report.composed), str(report)
    with torch.no_grad():
        torch.testing.assert_close(composed(*inputs), model(*inputs), rtol=5e-2, atol=5e-2)
