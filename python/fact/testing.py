"""What the pattern folders' composition tests share (patterns/*/tests/test_*_compose.py); it
needs pytest, so only tests import it.

    needs_engine_plan                    skips a test where the engine cannot plan in process
    optimize_eagerly(module, inputs, work_dir, precision="native", patterns=None)
                                         fact.optimize with the eager remainder (no Inductor)
    assert_matches(composed, module, make_inputs, seeds=(1, 2), tol=2e-2)
                                         the composed module's outputs against the module's, on
                                         fresh inputs per seed: same shapes and strides, not all
                                         zero, within `tol`; the planned signature must not fall
                                         back (a warning fails it)
    outputs(value)                       a forward's outputs as a tuple
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pytest
import torch

import fact
import fact.compose

ENGINE_CAN_PLAN, ENGINE_WHY_NOT = fact.compose.engine_can_plan()
needs_engine_plan = pytest.mark.skipif(
    not ENGINE_CAN_PLAN, reason=f"the engine's in-process planning is not available: {ENGINE_WHY_NOT}")


def optimize_eagerly(module: torch.nn.Module, inputs: Sequence[Any], work_dir: Path,
                     precision: str = "native", patterns: Iterable[str] | None = None):
    return fact.optimize(module, tuple(inputs), work_dir=work_dir, remainder="eager",
                         precision=precision, patterns=patterns)


def outputs(value: Any) -> tuple:
    """A forward's outputs as a tuple (one tensor: a tuple of it)."""
    return value if isinstance(value, tuple) else (value,)


def assert_matches(composed: torch.nn.Module, module: torch.nn.Module,
                   make_inputs: Callable[[], Sequence[Any]], seeds: Sequence[int] = (1, 2),
                   tol: float = 2e-2) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the planned signature must not fall back
        for seed in seeds:
            torch.manual_seed(seed)
            inputs = make_inputs()
            got_all, want_all = outputs(composed(*inputs)), outputs(module(*inputs))
            assert len(got_all) == len(want_all)
            for got, want in zip(got_all, want_all):
                assert got.shape == want.shape and got.stride() == want.stride(), \
                    (got.shape, got.stride(), want.shape, want.stride())
                assert got.abs().max() > 0
                torch.testing.assert_close(got, want, rtol=tol, atol=tol)
