"""Regenerates the rmsnorm pattern's committed graph fixtures (captures of rmsnorm_models.py at
small sizes, read by test_discover_rmsnorm.cpp).

    $V/bin/python patterns/rmsnorm/tests/graphs/regenerate.py [--check]

--check compares instead of writing and exits 1 when a fixture is stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "tests" / "python"))  # graph_fixtures

from graph_fixtures import regenerate  # noqa: E402
import rmsnorm_models as R  # noqa: E402

X = (2, 16, 64)  # batch, positions, hidden


def fixtures():
    yield "norm_qkv_bf16", R.NormQKV(), torch.bfloat16, [X]
    yield "norm_qkv_bias_bf16", R.NormQKV(bias=True), torch.bfloat16, [X]
    yield "norm_qkv_fp32", R.NormQKV(), torch.float32, [X]
    yield "norm_swiglu_bf16", R.NormSwiGLU(), torch.bfloat16, [X]
    yield "norm_also_returned_bf16", R.NormAlsoReturned(), torch.bfloat16, [X]
    yield "norm_other_dim_bf16", R.NormOverOtherDim(), torch.bfloat16, [X]
    yield "norm_computed_weight_bf16", R.NormComputedWeight(R.exp_weight), torch.bfloat16, [X]
    yield "norm_offset_weight_bf16", R.NormComputedWeight(R.one_plus_weight), torch.bfloat16, [X]
    yield "norm_gemma_qkv_bf16", R.GemmaNormQKV(), torch.bfloat16, [X]


def main() -> int:
    return regenerate(fixtures(), HERE)


if __name__ == "__main__":
    sys.exit(main())
