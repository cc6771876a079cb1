"""Attention in modules composed for training: the engine gives a written-out attention with no
mask or a causal one the training form of PyTorch's fused attention (fact.compose.training_forms
traces it in), so it trains with a fused backward, its gradients within the precision contract
of float64 autograd; what has no such form (a random buffer mask, attention dropout) is traced
as written, with the reason."""
from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests" / "python"))  # compose_testing and the training tests' helpers

from compose_testing import needs_engine_plan  # noqa: E402
from fact.compose.training_forms import trace_training_forms  # noqa: E402
from test_training_cpu import assert_gradients_match_float64, loss_of, optimize_for_training, train  # noqa: E402


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
    assert_gradients_match_float64(model, model, x)


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
    traced, notes = trace_training_forms(model.train(), (x,), tmp_path)
    assert traced is model
    assert any("kept as written: outputs or gradients off" in n for n in notes), notes


@needs_engine_plan
def test_under_autocast_the_forms_are_checked_with_autocast_off_and_under_it(tmp_path):
    # In bf16 a gradient can be mostly rounding, as written and traced alike; the check with
    # autocast off is the one that tells a form computing something else from rounding.
    model, x = llama_block()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        traced, notes = trace_training_forms(model.train(), (x,), tmp_path / "llama")
    assert traced is not model, notes
    checked = next(n for n in notes if n.startswith("training forms"))
    errors = dict(re.findall(r"(autocast off|under autocast) within rel_err ([0-9.e+-]+)", checked))
    # float32 rounding with autocast off; bf16's under it (a weight's gradient reading zero, as
    # with a stale autocast cast, would read 1.0)
    assert float(errors["autocast off"]) < 1e-5 and float(errors["under autocast"]) < 0.05, checked
    masked = MaskedAttention()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        traced, notes = trace_training_forms(masked.train(), (torch.randn(2, 16, 64),), tmp_path / "masked")
    assert traced is masked
    assert any("kept as written: outputs or gradients off (autocast off)" in n for n in notes), notes


@needs_engine_plan
def test_attention_dropout_in_training_stays_written_out(tmp_path):
    model, x = MaskedAttention(dropout=0.1), torch.randn(2, 16, 64)
    model.mask.zero_()
    traced, notes = trace_training_forms(model.train(), (x,), tmp_path)
    assert traced is model
    assert any("traced as written for training (dropout" in n for n in notes), notes


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
        assert_gradients_match_float64(model, model, x)
    finally:
        torch._dynamo.reset()
