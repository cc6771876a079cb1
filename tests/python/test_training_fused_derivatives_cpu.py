"""Training a Linear → activation → Linear block composes the backward graph's dgrad GEMM WITH the
activation's derivative in its epilogue (patterns/gemm/README.md, "Backward steps"):
aten.gelu_backward (tanh → gemm_gelu_tanh_grad, erf → gemm_gelu_erf_grad),
aten.threshold_backward at 0 (ReLU → gemm_relu_grad) and aten.silu_backward (gemm_silu_grad) run
in the GEMM's call, the saved forward tensor its M×N operand; no derivative op is left to
PyTorch. On the CPU path: float32 models in precision "strict", gradients against float64
autograd, SGD steps against the original's."""
from __future__ import annotations

import copy

import pytest
import torch

from compose_testing import needs_engine_plan
from test_training_cpu import STRICT, assert_gradients_match_float64, loss_of, optimize_for_training, train

# activation module, the fused rule of the dgrad GEMM, the backward op it absorbs
ACTIVATIONS = {
    "gelu_tanh": (lambda: torch.nn.GELU(approximate="tanh"), "gemm_gelu_tanh_grad",
                  torch.ops.aten.gelu_backward.default),
    "gelu_erf": (torch.nn.GELU, "gemm_gelu_erf_grad", torch.ops.aten.gelu_backward.default),
    "relu": (torch.nn.ReLU, "gemm_relu_grad", torch.ops.aten.threshold_backward.default),
    "silu": (torch.nn.SiLU, "gemm_silu_grad", torch.ops.aten.silu_backward.default),
}


def block(activation: str, x_shape: tuple[int, ...]):
    make, _, _ = ACTIVATIONS[activation]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), make(), torch.nn.Linear(64, 16))
    torch.manual_seed(1)
    return model, torch.randn(*x_shape)


# [2, 8, 32]: tokens as [batch, seq]; the saved pre-activation is [2, 8, 64], the dgrad product
# [16, 64] viewed back to it. [16, 32]: everything 2-D.
@needs_engine_plan
@pytest.mark.parametrize("x_shape", [(2, 8, 32), (16, 32)], ids=["3d", "2d"])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_dgrad_gemm_fuses_the_activation_derivative(tmp_path, activation, x_shape):
    model, x = block(activation, x_shape)
    original = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    backward = composed.fact_report.backward
    _, rule, backward_op = ACTIVATIONS[activation]
    rules = sorted(entry.rule for entry in backward.composed)
    assert rules == sorted([rule, "gemm", "gemm"]), str(backward)
    assert all(entry.verified and entry.rel_err <= STRICT for entry in backward.composed), str(backward)
    [fused] = [entry for entry in backward.composed if entry.rule == rule]
    assert [call.kind for call in fused.calls] == ["gemm"], str(backward)
    assert any(backward_op.__name__.split(".")[0] in node for node in fused.nodes), fused.nodes
    graph = composed.graphs["backward"].graph_module.graph
    assert not any(n.target is backward_op for n in graph.nodes), "the derivative must run in the GEMM's call"
    loss_of(composed(x)).backward()
    assert_gradients_match_float64(model, original, x)


@needs_engine_plan
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu"])
def test_sgd_steps_with_the_fused_derivative_match_the_original(tmp_path, activation):
    model, x = block(activation, (2, 8, 32))
    twin = copy.deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path)
    _, rule, _ = ACTIVATIONS[activation]
    assert rule in [entry.rule for entry in composed.fact_report.backward.composed]
    got = train(composed, model.parameters(), x, steps=4, optimizer=torch.optim.SGD)
    want = train(twin, twin.parameters(), x, steps=4, optimizer=torch.optim.SGD)
    assert got[-1] < got[0], got
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
