"""GEMMs whose rows are not 16-byte aligned, composed end to end on the CPU (patterns/gemm/README.md,
"Alignment: padding"): the engine accepts them instead of declining, the plan says how the
call is padded ("K padded 770→776") and pads a weight once (a derived operand, `pad`), and the
composed replacement is verified against the original subgraph in float64 (fact.verify) with
the host reference standing in for the kernels. What the kernels' entries do with the padding
on the GPU is tests/test_kind_padding.cpp's (the plan executed on the host) and
test_gemm_padding_gpu.py's (the real kernels)."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(REPO_ROOT / "python"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))  # compose_testing: what the compose tests share

from compose_testing import assert_matches, needs_engine_plan, optimize_eagerly  # noqa: E402


class Linear(torch.nn.Module):
    def __init__(self, k, n, bias=True):
        super().__init__()
        self.fc = torch.nn.Linear(k, n, bias=bias)

    def forward(self, x):
        return self.fc(x)


class RowMajorWeight(torch.nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(k, n) / k ** 0.5)

    def forward(self, x):
        return x @ self.weight


class Bmm(torch.nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


class Scores(torch.nn.Module):
    """q @ kᵀ on heads split from one projection: two batch modes, head dim 12 (24 bytes)."""

    def forward(self, q, k):
        return torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1)) * 0.25


def _composed_one(composed, note: str):
    report = composed.fact_report
    assert len(report.composed) == 1, str(report)
    entry = report.composed[0]
    assert entry.verified and entry.rel_err <= entry.tolerance, str(report)
    assert entry.note == note, str(report)
    assert note in str(report)
    return entry


@needs_engine_plan
def test_bf16_linear_with_k_770_runs_padded(tmp_path):
    torch.manual_seed(0)
    module = Linear(770, 96).to(torch.bfloat16).eval()
    make = lambda: (torch.randn(4, 16, 770, dtype=torch.bfloat16),)  # noqa: E731
    composed = optimize_eagerly(module, make(), tmp_path, "native")
    entry = _composed_one(composed, "K padded 770\u2192776")
    assert entry.rule == "gemm_bias"
    # The weight is padded once, when the plan is applied.
    assert len(entry.derived) == 1 and "zero-padded once" in entry.derived[0], entry.derived
    assert_matches(composed, module, make)


@needs_engine_plan
def test_float32_strict_k_5921_pads_k_and_n(tmp_path):
    torch.manual_seed(0)
    module = Linear(5921, 29).eval()
    make = lambda: (torch.randn(37, 5921),)  # noqa: E731
    composed = optimize_eagerly(module, make(), tmp_path, "strict")
    _composed_one(composed, "K padded 5921\u21925924, N padded 29\u219232")
    # The output only leaves the graph: a view of its [37, 32] allocation (padded rows).
    assert_matches(composed, module, make, tol=1e-5, strides=[(32, 1)])


@needs_engine_plan
def test_tiny_k_and_a_row_major_weight(tmp_path):
    torch.manual_seed(0)
    module = Linear(3, 64).to(torch.bfloat16).eval()
    make = lambda: (torch.randn(32, 3, dtype=torch.bfloat16),)  # noqa: E731
    composed = optimize_eagerly(module, make(), tmp_path / "tiny", "native")
    _composed_one(composed, "K padded 3\u21928")
    assert_matches(composed, module, make)

    module = RowMajorWeight(770, 48).to(torch.bfloat16).eval()
    make = lambda: (torch.randn(40, 770, dtype=torch.bfloat16),)  # noqa: E731
    composed = optimize_eagerly(module, make(), tmp_path / "row", "native")
    _composed_one(composed, "K padded 770\u2192776")
    assert_matches(composed, module, make)


@needs_engine_plan
def test_batched_products_of_activations_run_padded(tmp_path):
    torch.manual_seed(0)
    make = lambda: (torch.randn(3, 20, 770, dtype=torch.bfloat16),  # noqa: E731
                    torch.randn(3, 770, 24, dtype=torch.bfloat16))
    composed = optimize_eagerly(Bmm(), make(), tmp_path / "bmm", "native")
    entry = _composed_one(composed, "K padded 770\u2192776")
    assert entry.derived == []  # activations: staged per call by the kernel's entry
    assert_matches(composed, Bmm(), make)

    make = lambda: (torch.randn(2, 16, 4, 12, dtype=torch.bfloat16),  # noqa: E731
                    torch.randn(2, 16, 4, 12, dtype=torch.bfloat16))
    composed = optimize_eagerly(Scores(), make(), tmp_path / "scores", "native")
    _composed_one(composed, "K padded 12\u219216")
    assert_matches(composed, Scores(), make)


@needs_engine_plan
def test_an_outer_product_stays_pytorchs(tmp_path):
    class Outer(torch.nn.Module):
        def forward(self, f, t):
            return f[:, None] @ t[None, :]

    composed = optimize_eagerly(Outer(), (torch.randn(8), torch.randn(32)), tmp_path)
    report = composed.fact_report
    assert not report.composed
    assert any("outer product (K=1)" in item.reason for item in report.left_to_pytorch), str(report)
