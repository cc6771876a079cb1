"""GEMMs whose rows are not 16-byte aligned on a Hopper GPU (marked `gpu`; skipped elsewhere):
the kernels' entries pad them (patterns/gemm/gemm_padding.h, gemm_padding.cuh: A staged per
call, the weight padded once by the plan, D written into the workspace and copied back where
its rows are unaligned), each replacement is verified by fact.optimize against the original
subgraph in float64 on the GPU, and the composed output is checked here against the module run
in float64 once more.

    scripts/pytest_gpu.sh                                    (the whole GPU suite)
    pytest -m gpu patterns/gemm/tests/test_gemm_padding_gpu.py -v -s

- the float32 `strict` product 8205 x 2949 x 5921 (every extent odd: K padded 5921→5924, N
  2949→2952): within the strict bound (1e-5); its speed against torch.compile is the `timed`
  test (≥ 2x: cuBLAS SGEMM runs on CUDA cores, the 3xTF32 kernel on tensor cores);
- a bf16 Linear with K = 770 (K padded 770→776) and a batched bf16 product of two activations
  with K = 770 (both operands staged per call), within the bf16 output bound."""
import copy
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(REPO_ROOT / "python"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))  # compose_testing: what the compose tests share

import fact  # noqa: E402
from compose_testing import needs_engine_plan  # noqa: E402


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _hopper(), reason="needs a Hopper GPU (sm_90a kernels)"),
]


class Product(torch.nn.Module):
    """x @ Wᵀ without a bias: the plain product."""

    def __init__(self, k, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n, k) / k ** 0.5)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


class Bmm(torch.nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def _rel_err_vs_float64(composed, module, inputs) -> float:
    with torch.no_grad():
        got = composed(*inputs).double()
        reference = copy.deepcopy(module).double()(*[x.double() for x in inputs])
    return ((got - reference).norm() / reference.norm()).item()


def _padded_entry(composed, note):
    report = composed.fact_report
    assert len(report.composed) == 1, str(report)
    entry = report.composed[0]
    assert entry.implementation == "kernels" and entry.verified, str(report)
    assert entry.rel_err <= entry.tolerance, str(report)
    assert note in entry.note, str(report)
    print(report)
    return entry


STRICT_M, STRICT_N, STRICT_K = 8205, 2949, 5921


def _strict_case():
    torch.manual_seed(0)
    module = Product(STRICT_K, STRICT_N).cuda().eval()
    x = torch.randn(STRICT_M, STRICT_K, device="cuda")
    return module, (x,)


@needs_engine_plan
def test_float32_strict_8205x2949x5921_matches_float64(tmp_path):
    module, inputs = _strict_case()
    composed = fact.optimize(module, inputs, "strict", remainder="eager", work_dir=tmp_path,
                             speed_guard=False)
    _padded_entry(composed, "K padded 5921\u21925924, N padded 2949\u21922952")
    torch.manual_seed(1)
    fresh = (torch.randn(STRICT_M, STRICT_K, device="cuda"),)
    error = _rel_err_vs_float64(composed, module, fresh)
    assert error < 1e-5, error


@needs_engine_plan
@pytest.mark.timed
def test_float32_strict_8205x2949x5921_is_twice_as_fast_as_torch_compile(tmp_path):
    from fact.timing import l2_flushed_medians_ms
    module, inputs = _strict_case()
    composed = fact.optimize(module, inputs, "strict", remainder="eager", work_dir=tmp_path,
                             speed_guard=False, replacement_guard=False)
    _padded_entry(composed, "K padded 5921\u21925924")
    compiled = torch.compile(module)
    with torch.no_grad():
        composed(*inputs)
        compiled(*inputs)
        times = l2_flushed_medians_ms({"fact": lambda: composed(*inputs),
                                       "torch.compile": lambda: compiled(*inputs)})
    print(f"8205x2949x5921 float32 strict: {times}")
    assert times["torch.compile"] / times["fact"] >= 2.0, times


@needs_engine_plan
def test_bf16_linear_with_k_770_matches_float64(tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Linear(770, 1024).to("cuda", torch.bfloat16).eval()
    x = torch.randn(4, 512, 770, device="cuda", dtype=torch.bfloat16)
    composed = fact.optimize(module, (x,), "native", remainder="eager", work_dir=tmp_path,
                             speed_guard=False)
    entry = _padded_entry(composed, "K padded 770\u2192776")
    assert entry.derived, "the weight is padded once by the plan"
    torch.manual_seed(1)
    fresh = (torch.randn(4, 512, 770, device="cuda", dtype=torch.bfloat16),)
    error = _rel_err_vs_float64(composed, module, fresh)
    assert error < 2e-2, error


@needs_engine_plan
def test_bf16_batched_product_of_activations_with_k_770(tmp_path):
    torch.manual_seed(0)
    inputs = (torch.randn(8, 200, 770, device="cuda", dtype=torch.bfloat16),
              torch.randn(8, 770, 136, device="cuda", dtype=torch.bfloat16))
    composed = fact.optimize(Bmm(), inputs, "native", remainder="eager", work_dir=tmp_path,
                             speed_guard=False)
    _padded_entry(composed, "K padded 770\u2192776")
    error = _rel_err_vs_float64(composed, Bmm(), inputs)
    assert error < 2e-2, error


@needs_engine_plan
@pytest.mark.parametrize("read_by_softmax", [False, True], ids=["padded_rows", "direct_store"])
def test_bf16_lm_head_with_padded_rows_matches_float64(tmp_path, read_by_softmax):
    """GPT-2's LM head shape (N = 50257) on 2 x 512 tokens: returned as it is, the logits are
    the view of a [2, 512, 50264] allocation the aligned TMA kernel writes in place (patterns/gemm/
    README.md, "A result with padded rows"); read by a softmax, D keeps its rows (the
    direct-store variant). Not yet run on a GPU."""
    torch.manual_seed(0)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = Product(768, 50257)

        def forward(self, x):
            y = self.head(x)
            return torch.softmax(y.float(), dim=-1) if read_by_softmax else y

    module = Head().to("cuda", torch.bfloat16).eval()
    x = torch.randn(2, 512, 768, device="cuda", dtype=torch.bfloat16)
    composed = fact.optimize(module, (x,), "native", remainder="eager", work_dir=tmp_path,
                             speed_guard=False)
    report = composed.fact_report
    entry = report.composed[0]
    assert entry.implementation == "kernels" and entry.verified, str(report)
    with torch.no_grad():
        got = composed(x)
    if not read_by_softmax:
        assert "N padded 50257\u219250264" in entry.note, str(report)
        assert got.stride() == (512 * 50264, 50264, 1)
        assert got.untyped_storage().nbytes() == 2 * 512 * 50264 * 2
    error = _rel_err_vs_float64(composed, module, (x,))
    assert error < 2e-2, error
