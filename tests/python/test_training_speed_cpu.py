"""Never slower in training (fact.compose.training_speed; docs/compose.md, "Training"): a module
composed for training is timed doing a training step's forward and backward against the
original eagerly and torch.compile of the original; where it is slower, the faster one runs
the calls (per bucket over declared ranges). Timers are injected (speed_guard=callable) and
torch.compile of the original is stood in for by a counting wrapper, so these run on the CPU in
seconds; gradients are compared with float64 autograd whichever runs."""
from __future__ import annotations

import copy

import pytest
import torch

import fact
from compose_testing import needs_engine_plan
from fact.compose import training_module, training_speed
from fact.compose.training_module import TrainingComposedModule
from fact.compose.training_over_ranges import RangeTrainingComposedModule
from fact.dynamic_ranges import Range

STRICT = 1e-5


class _Block(torch.nn.Module):
    def __init__(self, embed: int = 32, hidden: int = 64):
        super().__init__()
        self.up = torch.nn.Linear(embed, hidden)
        self.down = torch.nn.Linear(hidden, embed)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x))) + x


class _Counted:
    """Stands in for torch.compile of the original: runs it, counting calls."""

    def __init__(self, module):
        self.module, self.calls = module, 0

    def __call__(self, *args):
        self.calls += 1
        return self.module(*args)


@pytest.fixture
def compiled(monkeypatch):
    made = []

    def stand_in(module, dynamic):
        made.append(_Counted(module))
        return made[-1]
    monkeypatch.setattr(training_speed, "compiled_for_training", stand_in)
    return made


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _timer(launches, composed_ms):
    """speed_guard: runs the candidate once; `composed_ms(bucket)` for the composed one (it
    launches FACT's kernels), 1.0 ms for eager and 0.9 for torch.compile's stand-in (candidates
    come in that order, three per bucket)."""
    seen = {"calls": 0}

    def timer(fn):
        before = launches["calls"]
        fn()
        index = seen["calls"]
        seen["calls"] += 1
        if launches["calls"] > before:
            return composed_ms(index // 3)
        return 1.0 if index % 3 == 1 else 0.9
    return timer


def _matches_float64(run, model, reference, x):
    model.zero_grad()
    reference.zero_grad()
    run(x).square().mean().backward()
    reference(x.double()).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        error = ((p.grad.double() - q.grad).norm() / q.grad.norm()).item()
        assert error < STRICT, (name, error)


def _composed_for_training(tmp_path, speed_guard):
    """(a block composed for training with speed_guard, the block, its float64 copy)."""
    torch.manual_seed(0)
    model = _Block().train()
    reference = copy.deepcopy(model).double()
    composed = fact.optimize(model, (torch.randn(4, 16, 32),), "strict", work_dir=tmp_path,
                             remainder="eager", speed_guard=speed_guard)
    assert isinstance(composed, TrainingComposedModule), composed.fact_report
    return composed, model, reference


@needs_engine_plan
def test_slower_composed_training_runs_torch_compile_of_the_original(tmp_path, launches, compiled,
                                                                    monkeypatch):
    composed, model, reference = _composed_for_training(tmp_path, _timer(launches, lambda bucket: 5.0))
    report = composed.fact_report
    assert report.runs.startswith("torch.compile of the original"), report.runs
    assert report.speed["composed_ms"] == 5.0 and report.speed["compiled_ms"] == 0.9, report.speed
    assert all(p.grad is None for p in model.parameters())      # timing accumulated no gradient
    [stand_in] = compiled
    calls, before = stand_in.calls, launches["calls"]
    _matches_float64(composed, model, reference, torch.randn(4, 16, 32))
    assert stand_in.calls == calls + 1 and launches["calls"] == before
    # handed over, a call with another autograd state (a frozen parameter) runs the faster
    # baseline as well, without walking the module's state, and trains what is not frozen
    model.up.bias.requires_grad_(False)
    monkeypatch.setattr(training_module, "autograd_state", _refused_walk)
    model.zero_grad()
    composed(torch.randn(4, 16, 32)).sum().backward()
    assert stand_in.calls == calls + 2 and model.up.bias.grad is None and model.up.weight.grad is not None


def _refused_walk(*args):
    raise AssertionError("autograd_state walked for a call handed to the faster baseline")


@needs_engine_plan
def test_faster_composed_training_stays_composed(tmp_path, launches, compiled):
    composed, model, reference = _composed_for_training(tmp_path, _timer(launches, lambda bucket: 0.5))
    assert composed.fact_report.runs.startswith("composed forward and backward graphs (0.5 ms"), \
        composed.fact_report.runs
    before = launches["calls"]
    _matches_float64(composed, model, reference, torch.randn(4, 16, 32))
    assert launches["calls"] > before


@needs_engine_plan
def test_over_ranges_the_slower_buckets_run_the_original(tmp_path, launches, compiled):
    torch.manual_seed(0)
    model = _Block().train()
    reference = copy.deepcopy(model).double()
    # the composed module slower in the first two buckets (seq <= 8), faster above
    composed = fact.optimize(model, (torch.randn(4, 16, 32),), "strict", work_dir=tmp_path,
                             remainder="eager", dynamic_shapes=({1: Range("seq", 4, 64)},),
                             speed_guard=_timer(launches, lambda bucket: 5.0 if bucket < 2 else 0.5))
    assert isinstance(composed, RangeTrainingComposedModule), composed.fact_report
    report = composed.fact_report
    # timed at the edges of the buckets the engine planned the graphs over
    assert [b["sizes"] for b in report.buckets] == [f"seq={e}" for e in report.forward.symbols[0]["edges"]]
    assert report.forward.symbols[0]["edges"] == [4, 8, 16, 32, 64], report.forward.symbols
    assert [b["runs"] for b in report.buckets] == ["torch.compile of the original"] * 2 + ["composed"] * 3, \
        report.buckets
    assert "3 of 5 timed bucket tuple(s)" in report.runs, report.runs
    for seq, runs_composed in [(6, False), (8, False), (9, True), (40, True)]:
        before = launches["calls"]
        _matches_float64(composed, model, reference, torch.randn(4, seq, 32))
        assert (launches["calls"] > before) == runs_composed, seq
