"""Modules that keep state in tensors keep their semantics when composed: plain tensor
attributes the forward reassigns or writes in place, registered buffers it reassigns or
copies into, and an RNN whose initial hidden state is a plain attribute (as benchmark
suites write them). Each composed module is called several times beside an eager twin that
started from the same state; outputs and state must match at every call, and fact.optimize
itself must leave the module's state as it found it. Also: the float64 check converts plain
tensor attributes."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import fact
from fact import measure, module_state


class PlainAttributeReassigned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.state = torch.zeros(4, 64)

    def forward(self, x):
        y = self.fc(x) + self.state
        self.state = y.detach() * 0.5
        return y


class PlainAttributeInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.total = torch.zeros(4, 64)

    def forward(self, x):
        y = torch.relu(self.fc(x)) + self.total
        self.total.add_(y.detach())
        return y


class BufferReassigned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.register_buffer("state", torch.zeros(4, 64), persistent=False)

    def forward(self, x):
        y = self.fc(x) + self.state
        self.state = y.detach()
        return y


class BufferCopiedInto(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.register_buffer("state", torch.zeros(4, 64))

    def forward(self, x):
        y = self.fc(x) * 0.5 + self.state
        self.state.copy_(y.detach())
        return y


class GRUWithInitialState(torch.nn.Module):
    """The initial hidden state as a plain attribute, moved to the input's device in forward."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(32, 48, 2)
        self.h0 = torch.randn(2, 4, 48)
        self.head = torch.nn.Linear(48, 48)

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        out, _ = self.gru(x, self.h0)
        return self.head(out)


def _state(module: torch.nn.Module) -> dict:
    held = {name: b.clone() for name, b in module.named_buffers()}
    held.update({q: vars(owner)[n].clone() for q, owner, n in module_state.plain_tensor_attributes(module)})
    return held


CASES = [(PlainAttributeReassigned, (4, 64)), (PlainAttributeInPlace, (4, 64)),
         (BufferReassigned, (4, 64)), (BufferCopiedInto, (4, 64)), (GRUWithInitialState, (6, 4, 32))]


@pytest.mark.parametrize("cls, shape", CASES, ids=[c.__name__ for c, _ in CASES])
def test_composed_module_keeps_the_state_semantics(cls, shape):
    torch.manual_seed(0)
    model = cls().eval()
    twin = copy.deepcopy(model)
    before = _state(model)
    x = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        composed = fact.optimize(model, (x,), "strict", speed_guard=False)
    assert composed.fact_report.runs == "composed", composed.fact_report.runs
    after = _state(model)
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), f"fact.optimize changed {name}"
    with torch.no_grad():
        for call in range(4):
            xi = torch.randn(*shape)
            got, want = composed(xi), twin(xi)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"call {call}")
            state, twin_state = _state(model), _state(twin)
            for name in twin_state:
                torch.testing.assert_close(state[name], twin_state[name], rtol=1e-5, atol=1e-5,
                                           msg=f"state {name} after call {call}")


def test_a_state_attribute_the_user_resets_is_read_by_the_next_call():
    torch.manual_seed(0)
    model = PlainAttributeReassigned().eval()
    twin = copy.deepcopy(model)
    x = torch.randn(4, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        composed = fact.optimize(model, (x,), "strict", speed_guard=False)
    with torch.no_grad():
        composed(x), twin(x)
        model.state = torch.full((4, 64), 3.0)
        twin.state = torch.full((4, 64), 3.0)
        torch.testing.assert_close(composed(x), twin(x), rtol=1e-5, atol=1e-5)
    held = model.state
    with torch.no_grad():
        composed(x)
    assert model.state is not held, "each call assigns a new tensor, as the forward does"


def test_the_capture_records_the_attributes_the_forward_writes():
    from fact import graph_capture

    model = PlainAttributeReassigned().eval()
    doc = graph_capture.capture(model, (torch.randn(4, 64),))
    assert doc["source"].get("state_attributes") == ["state"]
    assert torch.equal(model.state, torch.zeros(4, 64)), "the capture left the state as it was"
    doc = graph_capture.capture(GRUWithInitialState().eval(), (torch.randn(6, 4, 32),))
    assert "state_attributes" not in doc["source"], "h0.to(its own device) writes nothing"


def test_the_float64_check_converts_plain_tensor_attributes():
    model = GRUWithInitialState().eval()
    x = torch.randn(6, 4, 32, dtype=torch.float64)
    with measure.float64_in_place(model):
        out = model(x)
        assert model.h0.dtype == torch.float64
    assert out.dtype == torch.float64
    assert model.h0.dtype == torch.float32
