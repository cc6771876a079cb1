"""Training over declared dynamic ranges on the CPU path (docs/compose.md, "Training over
declared ranges"): `fact.optimize(model.train(), inputs, dynamic_shapes=...)` and
`torch.compile(model, backend="fact", dynamic=True, options={"dynamic": ...})` compose one
forward and one backward graph that serve every size inside the ranges. Each size's parameter
gradients are compared with float64 autograd of the original, and FACT's kernels (the host
reference here) must be what ran; sizes outside the ranges run the original with a warning."""
from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest
import sympy
import torch

import fact
from compose_testing import needs_engine_plan
from fact import dynamo_backend
from fact.compose.training_over_ranges import RangeTrainingComposedModule
from fact.compose.training_ranges import factors
from fact.dynamic_ranges import Range

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "models"))
from mingpt_block import MinGPTBlock  # noqa: E402

STRICT = 1e-5  # docs/architecture.md, precision contract: strict


class _LayerStack(torch.nn.Module):
    """Linear, GELU, Linear, LayerNorm and a residual add over (batch, seq, embed), returning a
    dict (the output structure is kept). The residual comes after the norm: a sum of squares of
    a LayerNorm's output alone is nearly constant, its gradient all cancellation."""

    def __init__(self, embed: int = 32, hidden: int = 64):
        super().__init__()
        self.up = torch.nn.Linear(embed, hidden)
        self.down = torch.nn.Linear(hidden, embed)
        self.norm = torch.nn.LayerNorm(embed)

    def forward(self, x):
        return {"out": self.norm(self.down(torch.nn.functional.gelu(self.up(x)))) + x}


def _largest_gradient_error(model, reference) -> float:
    errors = []
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None, name
        errors.append(((p.grad.double() - q.grad).norm() / q.grad.norm().clamp_min(1e-30)).item())
    return max(errors)


def _one_step_matches_float64(run, model, reference, shape, launches, *, fallback_is_error=True) -> int:
    """One forward and backward of `run` (returning a tensor) at `shape`: the parameter
    gradients within `strict` of float64 autograd of `reference`; returns how many FACT kernel
    calls ran. fallback_is_error: a warning (the original's fallback) fails the test."""
    x = torch.randn(*shape)
    model.zero_grad()
    reference.zero_grad()
    before = launches["calls"]
    with warnings.catch_warnings():
        if fallback_is_error:
            warnings.simplefilter("error")   # inside the ranges: no fallback to the original
        run(x).square().mean().backward()
    calls = launches["calls"] - before
    want = reference(x.double())
    (want["out"] if isinstance(want, dict) else want).square().mean().backward()
    assert _largest_gradient_error(model, reference) < STRICT, shape
    return calls


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_factors_split_products_and_refuse_the_rest():
    s0, s1 = sympy.symbols("s0 s1", positive=True, integer=True)
    assert factors(s0 * s1 * 12, "x") == [s0, s1, 12]
    assert factors(s0 ** 2, "x") == [s0, s0]
    assert factors(sympy.Integer(7), "x") == [7]
    with pytest.raises(ValueError, match="only products"):
        factors(s0 + 1, "dimension 0")


def test_whole_remainders_are_written_by_the_sizes_ranges():
    from types import SimpleNamespace

    from fact.size_expressions import _without_whole_remainders
    s0, s1 = sympy.symbols("s0 s1", positive=True, integer=True)
    lowest = {s0: 2, s1: 1}

    class Ranges:                                   # a shape environment's bound_sympy
        def bound_sympy(self, expr):
            return SimpleNamespace(lower=expr.subs(lowest))
    assert _without_whole_remainders(sympy.Mod(s1, s0 * s1), Ranges()) == s1
    assert _without_whole_remainders(sympy.Mod(s1, s1), Ranges()) == 0
    lowest[s0] = 1                                  # s0 may be 1: Mod(s1, s1) = 0, not s1
    assert _without_whole_remainders(sympy.Mod(s1, s0 * s1), Ranges()).has(sympy.Mod)
    assert _without_whole_remainders(sympy.Mod(s0 + 1, 2), Ranges()).has(sympy.Mod)


@needs_engine_plan
def test_one_module_trains_at_every_size_of_the_ranges(tmp_path, launches):
    torch.manual_seed(0)
    model = _LayerStack().train()
    reference = copy.deepcopy(model).double()
    example = torch.randn(4, 16, 32)
    shapes = ({0: Range("batch", 1, 64), 1: Range("seq", 2, 512)},)
    composed = fact.optimize(model, (example,), "strict", work_dir=tmp_path, dynamic_shapes=shapes)
    assert isinstance(composed, RangeTrainingComposedModule), composed.fact_report
    report = composed.fact_report
    assert report.forward is not None and report.backward is not None
    assert report.backward.composed, report.backward   # dgrad / wgrad GEMMs composed
    assert "declared ranges" in str(report)

    for shape in [(4, 16, 32), (8, 33, 32), (3, 100, 32), (64, 2, 32)]:
        # forward and backward GEMMs ran as FACT's
        assert _one_step_matches_float64(lambda x: composed(x)["out"], model, reference, shape, launches) >= 4
    # the rest of each graph ran as Inductor's code: composed inside dynamo's compilation, the
    # remainders compile at their first call, not while dynamo compiles (where a torch.compile'd
    # function runs eagerly for good)
    for which in ("forward", "backward"):
        graph = composed.graphs[which]
        assert isinstance(graph._compiled, torch._dynamo.eval_frame.OptimizedModule), which
        assert "inductor" in graph.fact_report.remainder, graph.fact_report.remainder
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 3   # the module's, then each remainder's


@needs_engine_plan
def test_outside_the_ranges_the_original_trains_with_a_warning(tmp_path, launches):
    torch.manual_seed(0)
    model = _LayerStack().train()
    reference = copy.deepcopy(model).double()
    shapes = ({0: Range("batch", 2, 8)},)
    composed = fact.optimize(model, (torch.randn(4, 8, 32),), "strict", work_dir=tmp_path,
                             dynamic_shapes=shapes, remainder="eager")
    assert isinstance(composed, RangeTrainingComposedModule)
    x = torch.randn(16, 8, 32)       # batch outside 2..8
    before = launches["calls"]
    with pytest.warns(UserWarning, match="batch=16 is not in 2..8"):
        composed(x)["out"].square().mean().backward()
    assert launches["calls"] == before
    reference(x.double())["out"].square().mean().backward()
    assert _largest_gradient_error(model, reference) < STRICT
    with pytest.warns(UserWarning, match="dim 1 is 9, composed for 8"):
        composed(torch.randn(4, 9, 32))


@needs_engine_plan
def test_adamw_steps_over_varying_sizes_match_the_originals(tmp_path):
    torch.manual_seed(0)
    model = _LayerStack().train()
    original = copy.deepcopy(model)
    composed = fact.optimize(model, (torch.randn(4, 16, 32),), "strict", work_dir=tmp_path,
                             dynamic_shapes=({0: Range("batch", 1, 16), 1: Range("seq", 4, 64)},),
                             remainder="eager")
    assert isinstance(composed, RangeTrainingComposedModule)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, original)]
    generator = torch.Generator().manual_seed(3)
    for step in range(6):
        x = torch.randn(2 + step, 4 + 7 * step, 32, generator=generator)
        losses = []
        for module, optimizer in zip((composed, original), optimizers):
            optimizer.zero_grad()
            loss = module(x)["out"].square().mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[1]), (step, losses)


@needs_engine_plan
def test_the_mingpt_block_trains_over_batch_and_sequence(tmp_path, launches):
    torch.manual_seed(0)
    model = MinGPTBlock(embed=32, heads=2, max_seq_len=128).train()
    reference = copy.deepcopy(model).double()
    composed = fact.optimize(model, (torch.randn(2, 16, 32),), "strict", work_dir=tmp_path,
                             dynamic_shapes=({0: Range("batch", 1, 8), 1: Range("seq", 2, 64)},),
                             remainder="eager")
    assert isinstance(composed, RangeTrainingComposedModule), composed.fact_report
    # the backward graph's stride checks hold Mod(seq, batch*seq): written as seq, since dynamo's
    # graph serves batch >= 2 (fact.dynamo_dynamic.within_dynamos_bounds)
    assert composed.fact_report.forward.composed and composed.fact_report.backward.composed, \
        composed.fact_report
    for shape in [(2, 16, 32), (3, 41, 32)]:
        assert _one_step_matches_float64(composed, model, reference, shape, launches) > 0, shape


@needs_engine_plan
def test_the_dynamo_backend_trains_a_graph_with_declared_ranges(tmp_path, launches):
    torch.manual_seed(0)
    model = _LayerStack().train()
    reference = copy.deepcopy(model).double()
    first = len(dynamo_backend.reports)
    compiled = torch.compile(model, backend="fact", dynamic=True,
                             options={"dynamic": "batch=2..32,seq=2..128", "dims": "0:batch,seq,_",
                                      "precision": "strict", "work_dir": str(tmp_path)})
    for shape in [(4, 16, 32), (5, 77, 32)]:
        assert _one_step_matches_float64(lambda x: compiled(x)["out"], model, reference, shape, launches,
                                         fallback_is_error=False) >= 4, shape
    graphs = [r.graph for r in dynamo_backend.reports[first:]]
    assert graphs == ["forward", "backward"], graphs   # one pair served both sizes


@needs_engine_plan
def test_a_symbolic_graph_without_a_range_trains_as_dynamo_captured_it(tmp_path):
    torch.manual_seed(0)
    model = _LayerStack().train()
    first = len(dynamo_backend.reports)
    compiled = torch.compile(model, backend="fact", dynamic=True,
                             options={"precision": "strict", "work_dir": str(tmp_path)})
    compiled(torch.randn(4, 16, 32))["out"].sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    reasons = [item.reason for r in dynamo_backend.reports[first:] for item in r.left_to_pytorch]
    assert any("needs their ranges" in reason for reason in reasons), reasons


@needs_engine_plan
def test_two_modules_composed_over_ranges_keep_their_own_graphs(tmp_path, launches):
    """Each composed module's TorchDynamo cache is its own (a code object per module): composing
    a second module neither replaces nor recompiles the first's graphs."""
    torch.manual_seed(0)
    first, second = _LayerStack().train(), _LayerStack(embed=32, hidden=96).train()
    references = [copy.deepcopy(m).double() for m in (first, second)]
    shapes = ({0: Range("batch", 2, 8), 1: Range("seq", 2, 64)},)
    composed = [fact.optimize(m, (torch.randn(4, 16, 32),), "strict", work_dir=tmp_path / str(i),
                              dynamic_shapes=shapes, remainder="eager")
                for i, m in enumerate((first, second))]
    for module, run, reference in zip((first, second), composed, references):
        assert isinstance(run, RangeTrainingComposedModule), run.fact_report
        assert _one_step_matches_float64(lambda x, run=run: run(x)["out"], module, reference,
                                         (3, 21, 32), launches) >= 4
