"""Composition on the CPU: fact.optimize with the reference implementation of fact::gemm,
guards and fallbacks, tracing through the fake implementation, and the ctypes mirror of
fact_abi.h."""
import copy
import ctypes
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fact.compose
import fact.ops  # noqa: F401
from fact import kernels

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench" / "models"))
from mingpt_block import MinGPTBlock  # noqa: E402

BATCH, SEQ_LEN, EMBED, HEADS = 2, 16, 64, 4


from engine_support import needs_engine  # noqa: E402


def small_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return MinGPTBlock(embed=EMBED, heads=HEADS, max_seq_len=SEQ_LEN).eval()


@pytest.fixture(scope="module")
def composed_block(tmp_path_factory):
    block = small_block()
    example = torch.randn(BATCH, SEQ_LEN, EMBED)
    composed = fact.optimize(block, (example,), precision="strict", remainder="eager",
                             work_dir=tmp_path_factory.mktemp("compose"))
    return block, composed


@needs_engine
def test_composed_mingpt_block_matches_the_original_on_fresh_inputs(composed_block):
    block, composed = composed_block
    report = composed.fact_report
    fusions = sorted(c.fusion for c in report.composed)
    assert fusions == ["gemm_bias", "gemm_bias_gelu_tanh", "gemm_bias_residual",
                       "gemm_bias_residual"], str(report)
    assert any("attention" in item.what for item in report.left_to_pytorch), str(report)
    targets = [n.target for n in composed.graph_module.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.fact.gemm_planned.default) == 4
    assert torch.ops.aten.linear.default not in targets
    assert torch.ops.aten.tanh.default not in targets
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        x = torch.randn(BATCH, SEQ_LEN, EMBED)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")  # the planned signature must not fall back
            got = composed(x)
            want = block(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_engine
def test_fake_implementation_traces_under_torch_compile_and_export(composed_block):
    block, composed = composed_block
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    compiled = torch.compile(composed.graph_module, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x), rtol=1e-5, atol=1e-5)
    exported = torch.export.export(composed.graph_module, (x,), strict=False)
    calls = [n for n in exported.graph.nodes if n.target == torch.ops.fact.gemm_planned.default]
    assert len(calls) == 4
    assert all(tuple(n.meta["val"].shape) in {(2, 16, 192), (2, 16, 64), (2, 16, 256)}
               for n in calls)


@needs_engine
def test_shape_change_warns_once_and_returns_the_original_result(composed_block):
    block, composed = composed_block
    longer = torch.randn(BATCH + 1, SEQ_LEN // 2, EMBED)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = composed(longer)
        second = composed(longer)
        want = block(longer)
    fallbacks = [w for w in caught if "running the original module" in str(w.message)]
    assert len(fallbacks) == 1
    assert "\n" not in str(fallbacks[0].message)
    assert torch.equal(first, want) and torch.equal(second, want)
    transposed = torch.randn(BATCH, EMBED, SEQ_LEN).transpose(1, 2)  # same shape, other strides
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = composed(transposed)
    assert any("strides" in str(w.message) for w in caught)
    with torch.no_grad():
        assert torch.equal(got, block(transposed))


def test_unexportable_module_returns_a_working_module_with_the_reason():
    class DataDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            if x.sum() > 0:
                return self.linear(x)
            return x - 1

    module = DataDependent()
    x = torch.ones(4, 8)
    composed = fact.optimize(module, (x,))
    assert composed.graph_module is None
    [item] = composed.fact_report.left_to_pytorch
    assert item.what == "module" and "cannot be exported" in item.reason
    with torch.no_grad():
        assert torch.equal(composed(x), module(x))
        assert torch.equal(composed(-x), module(-x))


def test_tf32_on_cpu_inputs_is_left_to_pytorch_with_the_reason():
    block = small_block()
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    composed = fact.optimize(block, (x,), precision="tf32")
    assert composed.graph_module is None
    assert "needs a GPU" in composed.fact_report.left_to_pytorch[0].reason
    with torch.no_grad():
        assert torch.equal(composed(x), block(x))


@needs_engine
def test_dtype_without_template_is_listed_and_the_module_still_works(tmp_path):
    block = small_block().double()
    x = torch.randn(BATCH, SEQ_LEN, EMBED, dtype=torch.float64)
    composed = fact.optimize(block, (x,), work_dir=tmp_path, remainder="eager")
    assert not composed.fact_report.composed
    reasons = [item.reason for item in composed.fact_report.left_to_pytorch]
    assert sum("float64 has no template" in r for r in reasons) == 4, reasons
    with torch.no_grad():
        assert torch.equal(composed(x), block(x))


@pytest.mark.parametrize("epilogue", ["", "bias", "scale:0.5,bias,act:relu", "act:leaky_relu,residual",
                                      "bias,act:hardtanh,multiply", "act:silu", "act:gelu_erf",
                                      "act:sigmoid"])
def test_reference_gemm_against_torch(epilogue):
    torch.manual_seed(0)
    batch, m, n, k = 2, 5, 6, 7
    a = torch.randn(batch, k, m).transpose(1, 2)            # column-major A
    b = torch.randn(batch, k, n)                            # row-major B
    bias, c = torch.randn(n), torch.randn(batch, m, n)
    alpha, beta, p0, p1 = 1.5, 0.25, -0.3, 0.4
    if "leaky" in epilogue:
        p0 = 0.1
    got = torch.ops.fact.gemm(a, b, bias, c, m, n, k, batch, [1, m, m * k], [0, n, k * n],
                              [batch * m, n], torch.float32, alpha, beta, p0, p1, epilogue, -1, "")
    x = alpha * (a.double() @ b.double())
    for word in filter(None, epilogue.split(",")):
        kind, _, arg = word.partition(":")
        if kind == "scale":
            x = x * float(arg)
        elif kind == "bias":
            x = x + bias.double()
        elif kind == "residual":
            x = x + beta * c.double()
        elif kind == "multiply":
            x = x * c.double()
        elif arg == "relu":
            x = torch.relu(x)
        elif arg == "leaky_relu":
            x = torch.nn.functional.leaky_relu(x, p0)
        elif arg == "hardtanh":
            x = torch.clamp(x, p0, p1)
        elif arg == "silu":
            x = torch.nn.functional.silu(x)
        elif arg == "gelu_erf":
            x = torch.nn.functional.gelu(x)
        elif arg == "sigmoid":
            x = torch.sigmoid(x)
    torch.testing.assert_close(got, x.float().reshape(batch * m, n), rtol=1e-6, atol=1e-6)


def test_unknown_epilogue_step_is_refused():
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    with pytest.raises(ValueError, match="unknown epilogue step"):
        torch.ops.fact.gemm(a, b, None, None, 2, 4, 3, 1, [0, 3, 0], [0, 4, 0], [2, 4],
                            torch.float32, 1.0, 1.0, 0.0, 0.0, "softmax", -1, "")


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_fact_gemm_args_mirrors_fact_abi_h(tmp_path):
    names = [name for name, _ in kernels.FactGemmArgs._fields_]
    lines = "\n".join(f'  printf("{n} %zu %zu\\n", offsetof(FactGemmArgs, {n}), '
                      f'sizeof(((FactGemmArgs*)0)->{n}));' for n in names)
    program = ("#include <stdio.h>\n#include <stddef.h>\n#include \"fact/runtime/fact_abi.h\"\n"
               f"int main(void) {{\n{lines}\n  printf(\"sizeof %zu 0\\n\", sizeof(FactGemmArgs));\n"
               f"  printf(\"version %d 0\\n\", FACT_ABI_VERSION);\n  return 0;\n}}\n")
    compiler = shutil.which("cc") or shutil.which("gcc")
    binary = tmp_path / "abi_offsets"
    subprocess.run([compiler, "-x", "c", "-", "-I", str(REPO_ROOT / "include"), "-o", str(binary)],
                   input=program, text=True, check=True)
    printed = {}
    for line in subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines():
        name, first, second = line.split()
        printed[name] = (int(first), int(second))
    for name in names:
        field = getattr(kernels.FactGemmArgs, name)
        assert printed[name] == (field.offset, field.size), name
    assert printed["sizeof"][0] == ctypes.sizeof(kernels.FactGemmArgs)
    assert printed["version"][0] == kernels.FACT_ABI_VERSION
    header = (REPO_ROOT / "include" / "fact" / "runtime" / "fact_abi.h").read_text()
    struct_body = header[header.index("typedef struct FactGemmArgs"):header.index("} FactGemmArgs;")]
    declared = [token.strip(" *;") for line in struct_body.splitlines()[1:]
                for token in line.split("/*")[0].replace(",", " ").split()
                if token.strip(" *;") and token.strip(" *;") not in
                ("int32_t", "int64_t", "float", "const", "void", "void*")]
    assert declared == names


def test_kernel_library_load_error_is_clear(tmp_path):
    with pytest.raises(kernels.KernelLoadError, match="cannot load"):
        kernels.KernelLibrary(tmp_path / "missing.so")


@needs_engine
def test_torch_compile_backend_fact_composes_the_dynamo_graph(tmp_path):
    from fact import dynamo_backend

    block = small_block()
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    torch._dynamo.reset()
    compiled = torch.compile(block, backend="fact", options={"work_dir": str(tmp_path)})
    with torch.no_grad():
        got = compiled(x)
        want = block(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    report = dynamo_backend.reports[-1]
    assert sorted(c.fusion for c in report.composed) == [
        "gemm_bias", "gemm_bias_gelu_tanh", "gemm_bias_residual", "gemm_bias_residual"], str(report)


def test_torch_compile_backend_fact_rejects_unknown_options():
    from fact.dynamo_backend import fact_backend

    with pytest.raises(ValueError, match="unknown option"):
        fact_backend(torch.fx.symbolic_trace(torch.nn.Identity()), [torch.ones(1)],
                     options={"precison": "tf32"})


HOST_KERNEL_SOURCE = r"""
#include <stddef.h>
#include "fact/runtime/fact_abi.h"
/* A host-memory stand-in for a generated kernel library: same exports, same ABI; computes
   D = alpha*A*B + bias (+ beta*C) for row-major A (lda) and column-major B (ldb). */
const char* fact_kernel_info(void) {
  return "{\"entry\": \"fact_00host00kernel00\", \"key\": \"00host00kernel00ff\", \"split_k\": 1}";
}
int fact_00host00kernel00(const FactGemmArgs* args, void* workspace, size_t* workspace_size,
                          void* stream) {
  if (!args || args->abi_version != FACT_ABI_VERSION) return FACT_ERR_INVALID_ARGS;
  if (workspace_size) { *workspace_size = (size_t)(args->m * 4); return FACT_OK; }
  if (args->batch != 1) return FACT_ERR_CANNOT_IMPLEMENT;
  if (!workspace && args->m > 0) return FACT_ERR_WORKSPACE;
  const float* a = args->a; const float* b = args->b; const float* c = args->c;
  const float* bias = args->bias; float* d = args->d;
  for (long i = 0; i < args->m; ++i)
    for (long j = 0; j < args->n; ++j) {
      double acc = 0;
      for (long p = 0; p < args->k; ++p) acc += (double)a[i * args->lda + p] * b[j * args->ldb + p];
      double x = args->alpha * acc + (bias ? bias[j] : 0.0);
      if (c) x += args->beta * c[i * args->ldc + j];
      d[i * args->ldd + j] = (float)x;
    }
  return FACT_OK;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_kernel_library_entry_called_through_ctypes_with_op_arguments(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    path = tmp_path / "libhost_kernel.so"
    subprocess.run([compiler, "-x", "c", "-", "-shared", "-fPIC", "-I", str(REPO_ROOT / "include"),
                    "-o", str(path)], input=HOST_KERNEL_SOURCE, text=True, check=True)
    handle = kernels.load(path)
    assert kernels.load(path) == handle
    assert kernels.handle_for_key("00host00kernel00ff") == handle
    library = kernels.library(handle)
    assert library.entry_name == "fact_00host00kernel00"
    torch.manual_seed(0)
    m, n, k = 5, 6, 7
    a, w = torch.randn(m, k), torch.randn(n, k)
    bias, c = torch.randn(n), torch.randn(m, n)
    d = torch.empty(m, n)
    args = fact.ops.gemm_args(a, w, bias, c, d, m, n, k, 1, [0, k, 0], [1, k, 0], 0.5, 2.0, 0.0, 0.0)
    assert library.workspace_size(args) == 4 * m
    workspace = torch.empty(4 * m, dtype=torch.uint8)
    assert library.launch(args, workspace.data_ptr(), 0) == kernels.FACT_OK
    want = torch.ops.fact.gemm(a, w, bias, c, m, n, k, 1, [0, k, 0], [1, k, 0], [m, n],
                               torch.float32, 0.5, 2.0, 0.0, 0.0, "bias,residual", -1, "")
    torch.testing.assert_close(d, want, rtol=1e-6, atol=1e-6)
    assert library.launch(args, None, 0) == 3  # FACT_ERR_WORKSPACE
    args.batch = 2
    assert library.launch(args, workspace.data_ptr(), 0) == kernels.FACT_ERR_CANNOT_IMPLEMENT


@needs_engine
def test_native_bfloat16_block_composes_with_the_reference_within_bfloat16_error(tmp_path):
    block = small_block().to(torch.bfloat16)
    x = torch.randn(BATCH, SEQ_LEN, EMBED, dtype=torch.bfloat16)
    composed = fact.optimize(block, (x,), precision="native", work_dir=tmp_path,
                             remainder="eager")
    assert len(composed.fact_report.composed) == 4, str(composed.fact_report)
    assert all(c.kernel_status == "rendered" for c in composed.fact_report.composed), \
        str(composed.fact_report.to_json())
    torch.manual_seed(5)
    fresh = torch.randn(BATCH, SEQ_LEN, EMBED, dtype=torch.bfloat16)
    with torch.no_grad():
        got = composed(fresh)
        exact = copy.deepcopy(block).double()(fresh.double())  # the bf16 weights, in float64
        want = block(fresh)
    assert got.dtype == torch.bfloat16
    error_fact = (got.double() - exact).abs().max().item()
    error_torch = (want.double() - exact).abs().max().item()
    assert error_fact <= 1.5 * error_torch, (error_fact, error_torch)
