"""Regenerates the rope pattern's committed graph fixtures (captures of rope_models.py at small
sizes, read by test_discover_rope.cpp).

    $V/bin/python patterns/rope/tests/graphs/regenerate.py [--check]

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
import rope_models as R  # noqa: E402

X = (2, 16, 64)  # batch, positions, hidden


def fixtures():
    yield "rotate_half_bf16", R.RotateHalf(), torch.bfloat16, [X]
    yield "rotate_half_bias_bf16", R.RotateHalf(bias=True), torch.bfloat16, [X]
    yield "rotate_half_untransposed_bf16", R.RotateHalf(transpose=False), torch.bfloat16, [X]
    yield "rotate_half_fp32", R.RotateHalf(), torch.float32, [X]
    yield "interleaved_bf16", R.Interleaved(), torch.bfloat16, [X]
    yield "per_sequence_tables_bf16", R.PerSequenceTables(), torch.bfloat16, [X]
    yield "table_per_head_bf16", R.TablePerHead(), torch.bfloat16, [X]
    yield "partial_rotary_bf16", R.PartialRotary(), torch.bfloat16, [X]
    yield "no_gemm_bf16", R.NoGemm(), torch.bfloat16, [(2, 4, 16, 16)]


def main() -> int:
    return regenerate(fixtures(), HERE)


if __name__ == "__main__":
    sys.exit(main())
