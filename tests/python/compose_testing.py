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
    corpus_model(name, dtype)            a corpus file's Model at its CPU_TEST_SIZES (seed 0,
                                         eval) and its make_inputs
    assert_within_float64_contract(composed, module, make_inputs, ...)
                                         the composed output within the conformance bound of
                                         the module run in float64, and close to the module
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import pytest
import torch

import fact
import fact.compose
from fact.conformance.corpus import CORPUS_DIR, OUTPUT_BOUND, load_at_cpu_sizes

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
                   tol: float = 2e-2, strides: Sequence[tuple] | None = None) -> None:
    """`strides`: each output's expected strides (default: the original's; a GEMM result with
    padded rows is a view of its padded allocation, patterns/gemm/README.md)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the planned signature must not fall back
        for seed in seeds:
            torch.manual_seed(seed)
            inputs = make_inputs()
            got_all, want_all = outputs(composed(*inputs)), outputs(module(*inputs))
            assert len(got_all) == len(want_all)
            expected = strides if strides is not None else [want.stride() for want in want_all]
            for got, want, stride in zip(got_all, want_all, expected):
                assert got.shape == want.shape and got.stride() == tuple(stride), \
                    (got.shape, got.stride(), want.shape, want.stride(), tuple(stride))
                assert got.abs().max() > 0
                torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def corpus_model(name: str, dtype: torch.dtype = torch.bfloat16):
    """(module, make_inputs): corpus/<name>.py's Model at its CPU_TEST_SIZES, built after
    torch.manual_seed(0), in `dtype`, in eval mode; make_inputs() draws the file's inputs."""
    corpus = load_at_cpu_sizes(CORPUS_DIR / f"{name}.py")
    torch.manual_seed(0)
    module = corpus.Model(*corpus.get_init_inputs()).to(dtype).eval()
    return module, lambda: corpus.get_inputs(dtype=dtype)


def assert_within_float64_contract(composed: torch.nn.Module, module: torch.nn.Module,
                                   make_inputs: Callable[[], Sequence[Any]], seed: int = 3,
                                   bound: float = OUTPUT_BOUND["native"],
                                   close_to_module: float | None = 5e-2) -> None:
    """On inputs drawn after torch.manual_seed(seed): ||composed - ref|| / ||ref|| < `bound`, with ref
    the module run in float64 (default: the conformance bound for `native`), and, unless
    `close_to_module` is None, the composed output within that rtol/atol of the module's own.
    The module is returned to its dtype afterwards."""
    dtype = next(module.parameters()).dtype
    with torch.no_grad():
        torch.manual_seed(seed)
        inputs = make_inputs()
        reference = module.double()(*[i.double() if i.is_floating_point() else i for i in inputs])
        module.to(dtype)
        got = composed(*inputs)
        error = ((got.double() - reference).norm() / reference.norm()).item()
        assert error < bound, (error, bound)
        if close_to_module is not None:
            torch.testing.assert_close(got, module(*inputs), rtol=close_to_module, atol=close_to_module)
