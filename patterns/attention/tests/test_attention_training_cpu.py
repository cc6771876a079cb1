"""Attention in modules composed for training: the engine gives a written-out attention with no
mask or a causal one the training form of PyTorch's fused attention (fact.compose.training_forms
traces it in), so it trains with a fused backward, its gradients within the precision contract
of float64 autograd; what has no such form (a random buffer mask, attention dropout) is traced
as written, with the reason."""
from __future__ import annotations

import copy
import importlib.util
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(ROOT / "python"))

import fact  # noqa: E402
from fact.compose.training_forms import trace_training_forms  # noqa: E402

ENGINE_CAN_PLAN, ENGINE_WHY_NOT = fact.compose.engine_can_plan()
needs_engine_plan = pytest.mark.skipif(
    not ENGINE_CAN_PLAN, reason=f"the engine's in-process planning is not available: {ENGINE_WHY_NOT}")
STRICT = 1e-5  # docs/architecture.md, precision contract: strict


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()


def assert_gradients_match_float64(model: nn.Module, x: torch.Tensor):
    """model's parameter gradients (already computed) against float64 autograd of a copy."""
    reference = copy.deepcopy(model).double()
    reference.zero_grad()
    loss_of(reference(x.double())).backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        assert rel_err(got.grad, want.grad) <= STRICT, (name, rel_err(got.grad, want.grad))


def train(forward, parameters, x, steps=3):
    opt = torch.optim.AdamW(parameters, lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(forward(x))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def optimize_for_training(model, x, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the traced signature must never fall back
        return fact.optimize(model.train(), (x,), "strict", work_dir=tmp_path, remainder="eager",
                             speed_guard=False)


def llama_block():
    spec = importlib.util.spec_from_file_location("llama_block", ROOT / "bench/models/llama_block.py")
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    torch.manual_seed(0)
    model = source.LlamaDecoderBlock(hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=256,
                                     max_seq_len=64)
    torch.manual_seed(1)
    return model, torch.randn(2, 24, 128)


class MaskedAttention(nn.Module):
    """Written-out attention under a fixed random additive mask (not causal) and dropout."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.randn(16, 16))

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(16) + self.mask
        return (self.dropout(scores.softmax(-1)) @ v).transpose(1, 2).reshape(2, 16, 64)


def forward_graph_code(composed) -> str:
    """The code of the forward graph AOTAutograd traced (before FACT composed it)."""
    return composed.graphs["forward"].original.code


@needs_engine_plan
def test_a_written_out_causal_attention_trains_as_fused_attention(tmp_path):
    model, x = llama_block()
    composed = optimize_for_training(model, x, tmp_path)
    notes = " ".join(composed.fact_report.notes)
    assert "scaled_dot_product_attention" in notes and "is_causal=True" in notes, notes
    code = forward_graph_code(composed)
    assert "scaled_dot_product" in code and "softmax" not in code, code
    model.zero_grad()
    loss_of(composed(x)).backward()
    assert_gradients_match_float64(model, x)


@needs_engine_plan
def test_fused_attention_trains_like_the_written_out_module(tmp_path):
    model, x = llama_block()
    eager = llama_block()[0]
    composed = optimize_for_training(model, x, tmp_path)
    got = train(composed, model.parameters(), x)
    want = train(eager, eager.parameters(), x)
    for a, b in zip(got, want):
        assert abs(a - b) <= 1e-5 * abs(b), (got, want)


@needs_engine_plan
def test_a_buffer_mask_that_is_not_causal_fails_the_check_and_stays_written_out(tmp_path):
    # Discovery takes an additive buffer mask for causal, its contents to be checked before use;
    # this one holds random values, and the float64 comparison keeps the attention written out.
    model, x = MaskedAttention(), torch.randn(2, 16, 64)
    traced, notes, left = trace_training_forms(model.train(), (x,), tmp_path)
    assert traced is model and notes == []
    assert left and "kept as written: outputs or gradients off" in left[-1][1], left


@needs_engine_plan
def test_attention_dropout_in_training_stays_written_out(tmp_path):
    model, x = MaskedAttention(dropout=0.1), torch.randn(2, 16, 64)
    model.mask.zero_()
    traced, notes, left = trace_training_forms(model.train(), (x,), tmp_path)
    assert traced is model and notes == []
    assert left and "dropout" in left[0][1], left


class InGraphCausal(nn.Module):
    """Written-out attention whose causal mask the forward builds (full, triu), as transformers'
    models do: dynamo keeps it in the graph, where discovery proves it causal."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
        mask = torch.full((16, 16), float("-inf"), device=x.device).triu(1)
        probs = (q @ k.transpose(-2, -1) * 0.25 + mask).softmax(-1)
        return (probs @ v).transpose(1, 2).reshape(2, 16, 64)


@needs_engine_plan
def test_the_torch_compile_backend_traces_the_attention_in_too(tmp_path):
    from fact import dynamo_backend

    torch.manual_seed(0)
    model, x = InGraphCausal().train(), torch.randn(2, 16, 64)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="fact", options={"precision": "strict", "work_dir": str(tmp_path)})
        loss_of(compiled(x)).backward()
        forward = dynamo_backend.reports[-2]
        notes = " ".join(forward.notes)
        assert forward.graph == "forward" and "scaled_dot_product_attention" in notes, notes
        assert_gradients_match_float64(model, x)
    finally:
        torch._dynamo.reset()
