"""Training forms (fact.compose.training_forms), the mechanism alone: a form the engine could
write is resolved against a captured graph, traced in at the call it replaces (its arguments
taken from earlier calls, shapes checked), declined with the engine's reason, or refused when it
names a node that is not a traced call."""
from __future__ import annotations

import pytest
import torch

from fact.compose.training_forms import FormMismatch, TracedForms, training_forms, verify_forms

SHAPE = [4, 8, 8]


def graph() -> dict:
    """A captured graph: y = a @ b (node "matmul"), z = y @ c ("matmul_1"), then relu."""
    return {"values": [{"id": n, "shape": SHAPE} for n in ("a", "b", "c", "matmul", "matmul_1")],
            "nodes": [{"id": "matmul", "target": "aten.matmul.default", "args": [{"tensor": "a"}, {"tensor": "b"}]},
                      {"id": "matmul_1", "target": "aten.matmul.default",
                       "args": [{"tensor": "matmul"}, {"tensor": "c"}]},
                      {"id": "relu", "target": "aten.relu.default", "args": [{"tensor": "matmul_1"}]}]}


def discovery(form: dict) -> dict:
    return {"matches": [{"pattern": "product", "nodes": ["matmul", "matmul_1"], "problems": [{"training_form": form}]}]}


# The form: add(a, cᵀ, alpha=2) in place of the second product's call.
FORM = {"op": "aten.add.Tensor", "replaces": "matmul_1",
        "args": [{"node": "matmul", "arg": 0}, {"node": "matmul_1", "arg": 1, "transpose": [-2, -1]}],
        "kwargs": {"alpha": 2.0}, "what": "a test form"}


class Products(torch.nn.Module):
    def forward(self, a, b, c):
        return torch.relu((a @ b) @ c)


def test_a_form_is_traced_in_at_the_call_it_replaces():
    forms, left = training_forms(discovery(FORM), graph())
    assert left == [] and len(forms) == 1
    assert forms[0].replaces == ("aten.matmul.default", 1) and forms[0].label == "product at matmul..matmul_1"
    a, b, c = (torch.randn(*SHAPE) for _ in range(3))
    got = TracedForms(Products(), forms)(a, b, c)
    torch.testing.assert_close(got, torch.relu(a + 2.0 * c.transpose(-2, -1)), rtol=0, atol=0)


def test_an_argument_of_another_shape_than_captured_raises():
    forms, _ = training_forms(discovery(FORM), graph())
    a, b, c = (torch.randn(2, 8, 8) for _ in range(3))
    with pytest.raises(FormMismatch, match="captured as"):
        TracedForms(Products(), forms)(a, b, c)


def test_a_replaced_call_that_does_not_happen_raises():
    forms, _ = training_forms(discovery(FORM), graph())

    class OneProduct(torch.nn.Module):
        def forward(self, a, b, c):
            return a @ b

    a, b, c = (torch.randn(*SHAPE) for _ in range(3))
    with pytest.raises(FormMismatch, match="did not happen"):
        TracedForms(OneProduct(), forms)(a, b, c)


def test_a_declined_form_and_an_untraced_node_are_left_with_their_reason():
    forms, left = training_forms(discovery({"declined": "dropout in training mode"}), graph())
    assert forms == [] and left == [("product at matmul..matmul_1", "dropout in training mode")]
    form = dict(FORM, replaces="relu")
    forms, left = training_forms(discovery(form), graph())
    assert forms == [] and "relu, not a call traced by call" in left[0][1], left


def test_verification_rejects_a_form_that_computes_something_else():
    forms, _ = training_forms(discovery(FORM), graph())

    class Parametrized(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.randn(*SHAPE))

        def forward(self, a, c):
            return torch.relu((a @ self.b) @ c)

    module = Parametrized()
    ok, measured = verify_forms(module, TracedForms(module, forms), (torch.randn(*SHAPE), torch.randn(*SHAPE)))
    assert not ok and "outputs or gradients off" in measured, measured
    ok, measured = verify_forms(module, module, (torch.randn(*SHAPE), torch.randn(*SHAPE)))
    assert ok, measured


def test_verification_leaves_the_module_state_as_it_was():
    forms, _ = training_forms(discovery(FORM), graph())

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(8)
            self.b = torch.nn.Parameter(torch.randn(*SHAPE))

        def forward(self, a, c):
            return self.norm((a @ self.b) @ c)

    module = Counting().train()
    before = module.norm.running_mean.clone(), int(module.norm.num_batches_tracked)
    verify_forms(module, TracedForms(module, forms), (torch.randn(*SHAPE), torch.randn(*SHAPE)))
    assert torch.equal(module.norm.running_mean, before[0])
    assert int(module.norm.num_batches_tracked) == before[1]
