"""Models that keep state, composed on the CPU (the engine's host reference runs the
replacements): an RNN's initial hidden state kept as plain tensor attributes, a running state
and a call counter updated in forward, hidden state carried between calls in a tuple, and state
in Python values. Each composed module runs several consecutive calls beside an eager twin
that started from the same state: the outputs and the module's state must match at every call,
or the module is declined with the reason in its report. The float64 checks convert every
floating tensor the forward reads (tensors in tuples too) and leave the module as they found it."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import fact
from fact import measure, module_state

B, H, I, T = 4, 32, 16, 6


class GRUWithH0(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(I, H)
        self.h0 = torch.zeros(1, B, H)
        self.head = torch.nn.Linear(H, H)

    def forward(self, x):
        out, _ = self.gru(x, self.h0)
        return self.head(out)


class RunningState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(H, H)
        self.register_buffer("state", torch.zeros(H))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.total = torch.zeros(H)          # a plain tensor attribute, updated in place

    def forward(self, x):
        y = self.fc(x) + self.state + self.total
        self.state.mul_(0.9).add_(x.mean(0))
        self.total += y.detach().mean(0) * 0.01
        self.count += 1
        return y


class LSTMWithH0C0(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(I, H)
        self.h0 = torch.randn(1, B, H)
        self.c0 = torch.randn(1, B, H)
        self.head = torch.nn.Linear(H, H)

    def forward(self, x):
        out, _ = self.lstm(x, (self.h0, self.c0))
        return self.head(out)


class LSTMCarriesHidden(torch.nn.Module):
    """The hidden state in a tuple attribute, carried from one call to the next."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(I, H)
        self.hidden = (torch.zeros(1, B, H), torch.zeros(1, B, H))
        self.head = torch.nn.Linear(H, H)

    def forward(self, x):
        out, (h, c) = self.lstm(x, self.hidden)
        self.hidden = (h.detach(), c.detach())
        return self.head(out)


class LSTMReadsHidden(LSTMCarriesHidden):
    """The initial hidden state in a tuple attribute the forward only reads."""

    def forward(self, x):
        out, _ = self.lstm(x, self.hidden)
        return self.head(out)


class MemoryInDict(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(H, H)
        self.memory = {"m": torch.zeros(B, H)}

    def forward(self, x):
        y = self.fc(x) + self.memory["m"]
        self.memory["m"].add_(y.detach() * 0.1)
        return y


class PythonCounter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(H, H)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x) * (1.0 + 0.1 * self.calls)


def _input(cls) -> torch.Tensor:
    return torch.randn(T, B, I) if "LSTM" in cls.__name__ or "GRU" in cls.__name__ else torch.randn(B, H)


def _containers(module: torch.nn.Module) -> list:
    """(qualified name, owner, name) of the list / tuple / dict attributes holding tensors."""
    return [(f"{prefix}.{name}" if prefix else name, owner, name)
            for prefix, owner in module.named_modules() for name, value in vars(owner).items()
            if isinstance(value, (list, tuple, dict)) and not name.startswith("_")
            and any(isinstance(leaf, torch.Tensor) for leaf in torch.utils._pytree.tree_leaves(value))]


def _state(module: torch.nn.Module) -> dict:
    """Every buffer, plain tensor attribute and tensor in a container attribute, by name."""
    held = {name: b.clone() for name, b in module.named_buffers()}
    held.update({q: vars(owner)[n].clone() for q, owner, n in module_state.plain_tensor_attributes(module)})
    for q, owner, n in _containers(module):
        for i, leaf in enumerate(torch.utils._pytree.tree_leaves(vars(owner)[n])):
            held[f"{q}[{i}]"] = leaf.clone() if isinstance(leaf, torch.Tensor) else leaf
    return held


def _double_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy made by hand: .double() converts parameters and buffers only."""
    wide = copy.deepcopy(model).double()
    widen = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
    for _, owner, name in module_state.plain_tensor_attributes(wide):
        owner.__dict__[name] = widen(vars(owner)[name])
    for _, owner, name in _containers(wide):
        owner.__dict__[name] = torch.utils._pytree.tree_map(widen, vars(owner)[name])
    return wide


def _compose(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fact.optimize(model, (x,), "strict", speed_guard=False, remainder="eager")


def _assert_same_state(state: dict, twin_state: dict, when: str):
    assert state.keys() == twin_state.keys(), when
    for name, want in twin_state.items():
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(state[name], want, rtol=1e-5, atol=1e-5, msg=f"{name} {when}")
        else:
            assert state[name] == want, f"{name} {when}"


def _run_beside_twin(composed, model, twin, cls, calls=4):
    with torch.no_grad():
        for call in range(calls):
            x = _input(cls)
            torch.testing.assert_close(composed(x), twin(x), rtol=1e-5, atol=1e-5, msg=f"output of call {call}")
            _assert_same_state(_state(model), _state(twin), f"after call {call}")


COMPOSED = [GRUWithH0, RunningState, LSTMWithH0C0, LSTMReadsHidden]


@pytest.mark.parametrize("cls", COMPOSED, ids=[c.__name__ for c in COMPOSED])
def test_composed_and_original_agree_call_after_call(cls):
    torch.manual_seed(0)
    model = cls().eval()
    twin = copy.deepcopy(model)
    before = _state(model)
    composed = _compose(model, _input(cls))
    report = composed.fact_report
    assert report.runs == "composed" and report.composed, (report.runs, report.left_to_pytorch)
    _assert_same_state(_state(model), before, "after fact.optimize (it must leave the state alone)")
    _run_beside_twin(composed, model, twin, cls)


@pytest.mark.parametrize("cls", COMPOSED, ids=[c.__name__ for c in COMPOSED])
def test_the_float64_check_converts_the_state_and_leaves_it_alone(cls):
    torch.manual_seed(0)
    model = cls().eval()
    held = {name: (value, value.dtype) for name, value in _state(model).items() if isinstance(value, torch.Tensor)}
    objects = {q: vars(owner)[n] for q, owner, n in _containers(model)}
    x = _input(cls)
    with torch.no_grad():
        with measure.float64_in_place(model):
            out = model(x.double())
        want = _double_copy(model)(x.double())
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, want)
    after = _state(model)
    for name, (value, dtype) in held.items():
        assert after[name].dtype == dtype and torch.equal(after[name], value), f"{name} changed"
    for q, value in objects.items():
        owner, _, name = q.rpartition(".")
        assert vars(model.get_submodule(owner))[name] is value, f"{q} is another object now"


def test_the_end_to_end_float64_check_runs_each_variant_from_the_same_state():
    torch.manual_seed(0)
    model = RunningState().eval()
    x = _input(RunningState)
    composed = _compose(model, x)
    with torch.no_grad():  # some state to start from
        composed(_input(RunningState))
    before = _state(model)
    check = measure.verify(model, composed, (x,), seed=7)
    assert check["fact_rel_err"] < 1e-6 and check["torch_rel_err"] < 1e-6, check
    _assert_same_state(_state(model), before, "after the check")


def test_a_hidden_state_the_user_assigns_is_read_by_the_next_call():
    torch.manual_seed(0)
    model = GRUWithH0().eval()
    twin = copy.deepcopy(model)
    composed = _compose(model, _input(GRUWithH0))
    with torch.no_grad():
        for call in range(3):
            model.h0 = torch.randn(1, B, H)
            twin.h0 = model.h0.clone()
            x = _input(GRUWithH0)
            torch.testing.assert_close(composed(x), twin(x), rtol=1e-5, atol=1e-5, msg=f"call {call}")


def test_a_buffer_the_user_assigns_is_read_and_updated_by_the_next_call():
    torch.manual_seed(0)
    model = RunningState().eval()
    twin = copy.deepcopy(model)
    composed = _compose(model, _input(RunningState))
    with torch.no_grad():
        model.state = torch.randn(H)
        twin.state = model.state.clone()
        _run_beside_twin(composed, model, twin, RunningState, calls=2)
        wider = torch.randn(B + 1, H)  # outside the plan: the original runs, then the composed again
        torch.testing.assert_close(composed(wider), twin(wider))
        _run_beside_twin(composed, model, twin, RunningState, calls=2)


def test_a_tuple_the_user_replaces_runs_the_original_with_a_warning():
    torch.manual_seed(0)
    model = LSTMReadsHidden().eval()
    twin = copy.deepcopy(model)
    composed = _compose(model, _input(LSTMReadsHidden))
    model.hidden = (torch.randn(1, B, H), torch.randn(1, B, H))
    twin.hidden = tuple(t.clone() for t in model.hidden)
    x = _input(LSTMReadsHidden)
    with torch.no_grad(), pytest.warns(UserWarning, match="held in the attribute 'hidden'"):
        got = composed(x)
    torch.testing.assert_close(got, twin(x))


DECLINED = [(LSTMCarriesHidden, "'hidden' (a tuple holding 2 tensor(s))"),
            (MemoryInDict, "'memory' (a dict holding 1 tensor(s))"),
            (PythonCounter, "'calls' (a Python int)")]


@pytest.mark.parametrize("cls, named", DECLINED, ids=[c.__name__ for c, _ in DECLINED])
def test_state_the_graph_cannot_keep_declines_the_module_with_the_reason(cls, named):
    torch.manual_seed(0)
    model = cls().eval()
    twin = copy.deepcopy(model)
    composed = _compose(model, _input(cls))
    report = composed.fact_report
    assert not report.composed
    reasons = [item.reason for item in report.left_to_pytorch]
    assert any("changes state on every call" in r and named in r for r in reasons), reasons
    assert report.runs.startswith("the original"), report.runs
    _assert_same_state(_state(model), _state(twin), "after fact.optimize")
    assert getattr(model, "calls", 0) == getattr(twin, "calls", 0)
    _run_beside_twin(composed, model, twin, cls, calls=3)
    assert getattr(model, "calls", 0) == getattr(twin, "calls", 0)


def test_a_cache_filled_by_the_first_call_is_not_state_that_changes():
    class FirstCallCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(H, H)
            self.sizes = None

        def forward(self, x):
            if self.sizes is None:
                self.sizes = [x.shape[-1]]
            return self.fc(x)

    model = FirstCallCache().eval()
    writes = module_state.forward_writes(model, lambda: model(torch.randn(B, H)))
    assert writes.not_kept == [] and model.sizes is None
