"""The guard of a module planned over declared ranges (fact.compose.range_guard, and
ComposedModule with it): inside the ranges the composed graph runs; outside, one warning per
signature and the original module, or ValueError with strict=True."""
import warnings

import pytest
import torch
import torch.fx

from fact.compose import ComposedModule
from fact.compose.range_guard import RangeGuard
from fact.report import FactReport
from fake_kind import size

SYMBOLS = [{"name": "batch", "min": 1, "max": 8, "hint": 2},
           {"name": "seq", "min": 8, "max": 64, "hint": 16, "multiple": 8}]
BATCH, SEQ = size("batch", (1, 1, 0)), size("seq", (1, 0, 1))
INPUTS = [{"shape": [BATCH, SEQ, 4], "dtype": "torch.float32"},
          {"shape": [BATCH, size("2*seq", (2, 0, 1))], "dtype": "torch.float32"}]
EXAMPLES = (torch.randn(2, 16, 4), torch.randn(2, 32))


class Doubles(torch.nn.Module):
    def forward(self, x, y):
        return x * 2, y * 2


class Triples(torch.nn.Module):
    def forward(self, x, y):
        return x * 3, y * 3


def _composed(strict=False):
    guard = RangeGuard(SYMBOLS, INPUTS, EXAMPLES)
    return ComposedModule(Doubles(), torch.fx.symbolic_trace(Triples()), None, FactReport(precision="strict", device="cpu"),
                          range_guard=guard, strict=strict)


@pytest.mark.parametrize("batch,seq", [(1, 8), (2, 16), (3, 40), (8, 64)])
def test_inside_the_ranges_the_composed_graph_runs(batch, seq):
    guard = RangeGuard(SYMBOLS, INPUTS, EXAMPLES)
    args = (torch.randn(batch, seq, 4), torch.randn(batch, 2 * seq))
    assert guard.check(args) == ((batch, seq), "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _composed()(*args)
    torch.testing.assert_close(out[0], args[0] * 3)


@pytest.mark.parametrize("args,why", [
    ((torch.randn(9, 16, 4), torch.randn(9, 32)), "batch=9 is outside batch in 1..8"),
    ((torch.randn(2, 12, 4), torch.randn(2, 24)), r"seq=12 is outside seq in 8..64 \(multiple of 8\)"),
    ((torch.randn(2, 72, 4), torch.randn(2, 144)), "seq=72 is outside"),
    ((torch.randn(2, 16, 4), torch.randn(3, 32)), "batch is 2 and 3"),
    ((torch.randn(2, 16, 5), torch.randn(2, 32)), "input 0 dim 2 is 5, the plan 4"),
    ((torch.randn(2, 16, 4), torch.randn(2, 40)), "input 1 dim 1 is 40, the plan 2\\*seq = 32"),
    ((torch.randn(2, 16, 4, 1), torch.randn(2, 32)), "input 0 has rank 4, the plan 3"),
    ((torch.randn(2, 16, 4).double(), torch.randn(2, 32)), "input 0 is torch.float64, the plan torch.float32"),
    ((torch.randn(2, 4, 16).transpose(1, 2), torch.randn(2, 32)), "input 0 is not contiguous"),
    ((torch.randn(2, 16, 4),), "1 inputs, the plan has 2"),
])
def test_outside_the_ranges_warns_once_and_runs_the_original(args, why):
    guard = RangeGuard(SYMBOLS, INPUTS, EXAMPLES)
    sizes, reason = guard.check(args)
    assert sizes is None and __import__("re").search(why, reason), reason
    if len(args) != 2:
        return
    composed = _composed()
    with pytest.warns(UserWarning, match="outside the plan"):
        out = composed(*args)
    torch.testing.assert_close(out[0], args[0] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per signature
        composed(*args)
    with pytest.raises(ValueError, match="outside the plan"):
        _composed(strict=True)(*args)


def test_a_symbol_no_input_binds_is_refused():
    with pytest.raises(ValueError, match="no input dimension binds seq"):
        RangeGuard(SYMBOLS, [{"shape": [BATCH, 16, 4], "dtype": "torch.float32"},
                             {"shape": [BATCH, 32], "dtype": "torch.float32"}], EXAMPLES)


@pytest.mark.parametrize("args", [
    (torch.randn(1, 8, 4), torch.randn(1, 16)),
    (torch.randn(8, 64, 4), torch.randn(8, 128)),
    (torch.randn(9, 16, 4), torch.randn(9, 32)),
    (torch.randn(2, 12, 4), torch.randn(2, 24)),
    (torch.randn(2, 16, 4), torch.randn(3, 32)),
    (torch.randn(2, 16, 5), torch.randn(2, 32)),
    (torch.randn(2, 16, 4), torch.randn(2, 40)),
    (torch.randn(2, 16, 4, 1), torch.randn(2, 32)),
    (torch.randn(2, 16, 4).double(), torch.randn(2, 32)),
    (torch.randn(2, 4, 16).transpose(1, 2), torch.randn(2, 32)),
    (torch.randn(2, 16, 4), 3),
    (torch.randn(2, 16, 4), torch.randn(2, 32), 3),
    (torch.randn(2, 16, 4), torch.randn(2, 32), 4),
])
def test_the_fast_check_agrees_with_the_rule_by_rule_one(args):
    """check() answers from _fits (every call) and asks _why_not only for the reason: both
    must accept the same calls, with the same sizes."""
    inputs, examples = INPUTS, EXAMPLES
    if len(args) == 3:     # a plan with a value input (a Python int the graph was traced with)
        inputs, examples = INPUTS + [{"value": "3"}], EXAMPLES + (3,)
    guard = RangeGuard(SYMBOLS, inputs, examples)
    slow_sizes, _ = guard._why_not(args)
    assert (guard._fits(args) if len(args) == len(inputs) else None) == slow_sizes
    assert guard.check(args)[0] == slow_sizes
