"""The fact::gemm op's registration (schema, fake, autograd) and its native C++ implementation
(src/torch_ext/fact_gemm_op.cpp, built by fact.native): it compiles and registers here on the CPU;
on a GPU it runs real FACT kernels against the reference, and its per-call CPU time is measured
against torch.nn.functional.linear."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fact.ops  # noqa: F401  (defines fact::gemm)
from engine_support import needs_engine
from fact import native

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO_ROOT / "python"

EXPECTED_SCHEMA = (
    "fact::gemm(Tensor a, Tensor b, Tensor? bias, Tensor? c, int m, int n, int k, int batch, "
    "int[] a_geometry, int[] b_geometry, int[] out_shape, ScalarType out_dtype, float alpha, "
    "float beta, float act_p0, float act_p1, str epilogue, int kernel_handle, str kernel_id) "
    "-> Tensor")

C_COMPILER = shutil.which("cc") or shutil.which("gcc")


def test_schema_is_unchanged():
    assert str(torch.ops.fact.gemm.default._schema) == EXPECTED_SCHEMA
    reference = str(torch.ops.fact.gemm_reference.default._schema)
    assert reference == EXPECTED_SCHEMA.replace("fact::gemm(", "fact::gemm_reference(")


def test_planned_schema():
    assert str(torch.ops.fact.gemm_planned.default._schema) == (
        "fact::gemm_planned(Tensor a, Tensor b, Tensor? bias, Tensor? c, int plan) -> Tensor")


def test_planned_gemm_equals_gemm_and_traces_under_torch_compile():
    torch.manual_seed(0)
    batch, m, n, k = 2, 5, 6, 7
    a = torch.randn(batch, k, m).transpose(1, 2)
    b, bias, c = torch.randn(batch, k, n), torch.randn(n), torch.randn(batch, m, n)
    arguments = (m, n, k, batch, [1, m, m * k], [0, n, k * n], [batch * m, n], torch.float32,
                 1.5, 0.25, 0.1, 0.0, "bias,act:leaky_relu,residual", -1, "")
    plan = fact.ops.plan_gemm(*arguments)
    assert fact.ops.plan_gemm(*arguments) == plan
    assert fact.ops.plan_gemm(*arguments[:-3], "bias", -1, "") != plan
    want = torch.ops.fact.gemm(a, b, bias, c, *arguments)
    assert torch.equal(torch.ops.fact.gemm_planned(a, b, bias, c, plan), want)

    def layer(x, weight, bias_, residual):
        return torch.ops.fact.gemm_planned(x, weight, bias_, residual, plan) + 1.0

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(a, b, bias, c), want + 1.0)
    torch._dynamo.reset()
    with pytest.raises(KeyError, match="no plan"):
        torch.ops.fact.gemm_planned(a, b, bias, c, 10_000)
    with pytest.raises(ValueError, match="unknown epilogue step"):
        fact.ops.plan_gemm(*arguments[:-3], "softmax", -1, "")


def _call(a, b, bias, m, n, k, out_dtype=torch.float32, epilogue="bias,act:relu"):
    return torch.ops.fact.gemm(a, b, bias, None, m, n, k, 1, [0, k, 0], [1, k, 0], [m, n],
                               out_dtype, 1.0, 0.0, 0.0, 0.0, epilogue, -1, "")


def test_fake_implementation_traces_under_torch_compile_fullgraph():
    m, n, k = 5, 6, 7
    torch.manual_seed(0)
    a, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)

    def layer(x, weight, b):
        return _call(x, weight, b, m, n, k) * 2.0

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    with torch.no_grad():
        got = compiled(a, w, bias)
    torch._dynamo.reset()
    want = 2.0 * torch.relu(a.double() @ w.double().T + bias.double())
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=1e-6)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = _call(mode.from_tensor(a), mode.from_tensor(w), mode.from_tensor(bias), m, n, k,
                     out_dtype=torch.bfloat16)
    assert fake.shape == (m, n) and fake.dtype == torch.bfloat16


def test_inputs_that_require_grad_fail_clearly_on_backward():
    m, n, k = 4, 3, 2
    a = torch.randn(m, k, requires_grad=True)
    w, bias = torch.randn(n, k), torch.randn(n)
    out = _call(a, w, bias, m, n, k)
    with pytest.raises(RuntimeError, match="fact::gemm"):
        out.sum().backward()
    with torch.no_grad():
        out = _call(a, w, bias, m, n, k)
    assert out.grad_fn is None
    torch.testing.assert_close(out, torch.relu(a.detach() @ w.T + bias))


def test_describe_says_which_cuda_implementation_runs():
    text = fact.ops.describe_implementation()
    assert text == native.describe()
    if native.active():
        assert text.startswith("native C++")
    else:
        assert text.startswith("Python ctypes")


# A host-memory stand-in kernel library whose fact_kernel_info has "key" and "entry" members
# inside a nested object too, so the native registry must read the top-level ones.
HOST_KERNEL_SOURCE = r"""
#include <stddef.h>
#include "fact/runtime/fact_abi.h"
const char* fact_kernel_info(void) {
  return "{\"abi_version\": 1, \"spec\": {\"entry\": \"nested_entry\", \"key\": \"nested\"},"
         " \"entry\": \"fact_native_test_entry\", \"key\": \"00native00test00\"}";
}
int fact_native_test_entry(const FactGemmArgs* args, void* workspace, size_t* workspace_size,
                           void* stream) {
  (void)workspace; (void)stream;
  if (workspace_size) { *workspace_size = 0; return FACT_OK; }
  return args ? FACT_OK : FACT_ERR_INVALID_ARGS;
}
"""

# Runs in a child process: loading the native library changes the process's dispatcher.
# torch.cuda.is_available is forced true so fact.kernels.load installs the native kernels as it
# does on a GPU machine.
NATIVE_CHECK = textwrap.dedent(r"""
    import json, shutil, sys, warnings
    import torch
    torch.cuda.is_available = lambda: True
    from fact import kernels, native, ops
    first, second = sys.argv[1], sys.argv[2]
    early_plan = ops.plan_gemm(4, 5, 3, 1, [0, 3, 0], [0, 5, 0], [4, 5], torch.float32, 1.0, 0.0,
                               0.0, 0.0, "", -1, "early")
    result = {"before": native.describe()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handles = [kernels.load(first), kernels.load(second), kernels.load(first)]
    result["warnings"] = [str(w.message) for w in caught]
    result["handles"] = handles
    result["active"] = native.active()
    result["describe"] = native.describe()
    result["paths"] = native.registered_paths()
    result["dispatch"] = torch._C._dispatch_dump("fact::gemm")
    try:
        native.register_kernel("/nonexistent/libnothing.so")
    except RuntimeError as error:
        result["missing"] = str(error).splitlines()[0]
    a = torch.randn(4, 3, requires_grad=True)
    b = torch.randn(3, 5)
    args = (None, None, 4, 5, 3, 1, [0, 3, 0], [0, 5, 0], [4, 5], torch.float32, 1.0, 0.0,
            0.0, 0.0, "", handles[0], "")
    out = torch.ops.fact.gemm(a, b, *args)
    try:
        out.sum().backward()
        result["backward"] = "no error"
    except RuntimeError as error:
        result["backward"] = str(error)
    with torch.no_grad():
        out = torch.ops.fact.gemm(a, b, *args)
    result["no_grad_matches"] = bool(torch.allclose(out, a.detach() @ b, atol=1e-6))
    # plans: one made before the native library loaded (caught up at install), one after
    # (plan_gemm checks that both registries give the same number)
    planned_args = (4, 5, 3, 1, [0, 3, 0], [0, 5, 0], [4, 5], torch.float32, 1.0, 0.0, 0.0,
                    0.0, "", handles[0], "")
    result["plans"] = [ops.plan_gemm(*planned_args[:-2], 0, "late")]
    out = torch.ops.fact.gemm_planned(a, b, None, None, result["plans"][0])
    try:
        out.sum().backward()
    except RuntimeError as error:
        result["planned_backward"] = str(error)
    result["planned_dispatch"] = torch._C._dispatch_dump("fact::gemm_planned")
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.skipif(C_COMPILER is None, reason="no C compiler")
@pytest.mark.skipif(torch.version.cuda is None, reason="torch is not a CUDA build")
def test_native_extension_compiles_loads_and_registers(tmp_path):
    """Builds the extension (or finds this source's build in the FACT cache), loads it in a child
    process and checks what it registers: the CUDA and Autograd kernels of fact::gemm with the
    Python schema (a mismatch fails the load), and the kernel registry with Python's handles."""
    first, second = tmp_path / "libfirst.so", tmp_path / "libsecond.so"
    subprocess.run([C_COMPILER, "-x", "c", "-", "-shared", "-fPIC", "-I", str(REPO_ROOT / "include"),
                    "-o", str(first)], input=HOST_KERNEL_SOURCE, text=True, check=True)
    shutil.copy(first, second)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    env.pop("FACT_NATIVE", None)
    run = subprocess.run([sys.executable, "-c", NATIVE_CHECK, str(first), str(second)], env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["active"], result
    assert result["before"].startswith("Python ctypes until")
    assert result["describe"].startswith("native C++"), result["describe"]
    assert result["handles"] == [0, 1, 0]
    assert result["paths"] == [str(first.resolve()), str(second.resolve())]
    assert not result["warnings"], result["warnings"]
    dispatch = result["dispatch"]
    cuda_line = next(line for line in dispatch.splitlines() if line.startswith("CUDA:"))
    autograd_line = next(line for line in dispatch.splitlines() if line.startswith("Autograd"))
    assert "fact_gemm_op.cpp" in cuda_line and "unboxed" in cuda_line, dispatch
    assert "fact_gemm_op.cpp" in autograd_line, dispatch
    assert "CPU: registered at" in dispatch and "ops.py" in dispatch
    assert "cannot load kernel library /nonexistent/libnothing.so" in result["missing"]
    assert "fact::gemm" in result["backward"] and "not implemented" in result["backward"]
    assert result["no_grad_matches"]
    assert result["plans"] == [1]
    assert "derivative for fact::gemm_planned is not implemented" in result["planned_backward"]
    planned = result["planned_dispatch"]
    assert any(line.startswith("CUDA:") and "fact_gemm_op.cpp" in line
               for line in planned.splitlines()), planned


@pytest.mark.skipif(torch.version.cuda is None, reason="torch is not a CUDA build")
def test_native_build_failure_keeps_the_compiler_output_and_is_not_retried(tmp_path):
    source_root = tmp_path / "checkout"
    (source_root / "src" / "torch_ext").mkdir(parents=True)
    (source_root / "include" / "fact" / "runtime").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "include" / "fact" / "runtime" / "fact_abi.h",
                source_root / "include" / "fact" / "runtime" / "fact_abi.h")
    (source_root / "src" / "torch_ext" / "fact_gemm_op.cpp").write_text(
        "this_is_not_cpp fact_native_test_marker;\n")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), FACT_SOURCE_DIR=str(source_root),
               FACT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("FACT_NATIVE", None)
    command = [sys.executable, "-m", "fact.native"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "failed to build" in first.stdout and "this_is_not_cpp" in first.stdout, first.stdout
    [failed] = (tmp_path / "cache" / "torch_ext").glob("*/failed.txt")
    written = failed.stat().st_mtime_ns
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1 and "this_is_not_cpp" in again.stdout
    assert failed.stat().st_mtime_ns == written  # remembered, not rebuilt


def test_native_turned_off_is_reported(monkeypatch):
    monkeypatch.setenv("FACT_NATIVE", "0")
    assert native._missing_prerequisite() == "turned off with FACT_NATIVE=0"


def test_build_key_depends_on_the_source(tmp_path, monkeypatch):
    key = native.build_key()
    copy = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "src" / "torch_ext", copy / "src" / "torch_ext")
    shutil.copytree(REPO_ROOT / "include" / "fact" / "runtime", copy / "include" / "fact" / "runtime")
    monkeypatch.setenv("FACT_SOURCE_DIR", str(copy))
    assert native.build_key() == key
    source = copy / "src" / "torch_ext" / "fact_gemm_op.cpp"
    source.write_text(source.read_text() + "\n// changed\n")
    assert native.build_key() != key
    monkeypatch.setenv("FACT_CACHE_DIR", str(tmp_path / "cache"))
    assert native.build_dir() == tmp_path / "cache" / "torch_ext" / native.build_key()


@needs_engine
def test_op_overhead_bench_runs_on_the_cpu_reference(tmp_path):
    """The GPU benchmark's plumbing (compose, record the calls, plan, time) on the CPU."""
    sys.path.insert(0, str(REPO_ROOT / "bench" / "compose"))
    import op_overhead

    setup = op_overhead.compose_mlp(precision="strict", work_dir=tmp_path, device="cpu",
                                    features=32, hidden=64)
    assert len(setup.gemm_calls) == 2
    assert [args[4:8] for args in setup.gemm_calls] == [(8, 64, 32, 1), (8, 32, 64, 1)]
    timings = op_overhead.op_timings(setup, calls=3, repeats=3)
    assert timings["implementation"] == "reference (CPU)"
    assert all(timings[name] > 0 for name in ("fact_gemm_us", "fact_gemm_planned_us", "linear_us",
                                              "composed_graph_us", "eager_module_us"))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Hopper) for FACT kernels")
def test_native_gemm_on_gpu_matches_the_reference_and_costs_little_cpu(tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "bench" / "compose"))
    import op_overhead

    try:
        setup = op_overhead.compose_mlp(precision="tf32", work_dir=tmp_path)
    except op_overhead.NothingComposed as error:
        pytest.fail(str(error))
    assert native.active(), native.describe()
    op = torch.ops.fact.gemm.default
    for args in setup.gemm_calls:
        assert args[17] >= 0, "the composed call carries no kernel handle"
        plan = fact.ops.plan_gemm(*args[4:])
        with torch.no_grad():
            got = op(*args)
            planned = torch.ops.fact.gemm_planned.default(*args[:4], plan)
            want = torch.ops.fact.gemm_reference.default(*args)
        error = (got.double() - want.double()).abs().max().item()
        assert error <= 1e-2 * want.double().abs().max().item(), error  # tf32 inputs
        torch.testing.assert_close(planned, got, rtol=1e-5, atol=1e-5)
    timings = op_overhead.op_timings(setup)
    print(json.dumps(timings, indent=2))
    # Generous bounds: the ctypes path costs tens of microseconds more than F.linear.
    assert timings["fact_gemm_us"] <= 2.0 * timings["linear_us"] + 5.0, timings
    assert timings["fact_gemm_planned_us"] <= 1.5 * timings["linear_us"] + 2.0, timings
