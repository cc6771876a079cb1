"""Attention in modules composed for training (fact.compose.training_attention): a written-out
causal attention trains as PyTorch's fused attention, its gradients within the precision
contract of float64 autograd; what cannot be fused stays written out with the reason."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch
import torch.nn as nn

from compose_testing import needs_engine_plan
from fact.compose.training_attention import (Attention, FusedAttention, FusionMismatch,
                                             fusable_attentions, fuse_attention_for_training)
from test_training_cpu import assert_gradients_match_float64, loss_of, optimize_for_training, train

ROOT = Path(__file__).resolve().parents[2]


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
    assert "PyTorch's fused attention" in notes and "causal" in notes, notes
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
    traced, notes, left = fuse_attention_for_training(model.train(), (x,), tmp_path)
    assert traced is model and notes == []
    assert left and "kept written out: outputs or gradients off" in left[-1][1], left


@needs_engine_plan
def test_attention_dropout_in_training_stays_written_out(tmp_path):
    model, x = MaskedAttention(dropout=0.1), torch.randn(2, 16, 64)
    model.mask.zero_()
    traced, notes, left = fuse_attention_for_training(model.train(), (x,), tmp_path)
    assert traced is model and notes == []
    assert left, left


def test_a_call_of_another_shape_than_exported_raises():
    attention = Attention(label="matmul..matmul_1", kind="matmul", scores_call=0, output_call=1, causal=True,
                          scale=0.25, q_shape=(2, 4, 16, 16), k_t_shape=(2, 4, 16, 16), v_shape=(2, 4, 16, 16))

    class Products(nn.Module):
        def forward(self, q, k, v):
            return (q @ k.transpose(-2, -1)).softmax(-1) @ v

    fused = FusedAttention(Products(), [attention])
    q = torch.randn(2, 4, 16, 16)
    out = fused(q, q, q)
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True, scale=0.25)
    assert torch.equal(out, want)
    other = torch.randn(2, 4, 8, 16)
    try:
        fused(other, other, other)
    except FusionMismatch as error:
        assert "exported as" in str(error)
    else:
        raise AssertionError("a call of another shape was fused")


def test_only_two_products_of_one_kind_without_dropout_are_fusable():
    graph = {"values": [{"id": n, "shape": [2, 4, 16, 16]} for n in ("q", "kt", "v")],
             "nodes": [{"id": "mm", "target": "aten.matmul.default", "args": [{"tensor": "q"}, {"tensor": "kt"}]},
                       {"id": "sm", "target": "aten.softmax.int", "args": [{"tensor": "mm"}]},
                       {"id": "mm2", "target": "aten.matmul.default", "args": [{"tensor": "sm"}, {"tensor": "v"}]}]}

    def match(**problem):
        base = {"mask_kind": "causal_top_left", "scale": 0.25, "seq": 16, "kv_seq": 16, "unsupported": "",
                "dropout": 0.0}
        return {"matches": [{"pattern": "attention", "nodes": ["mm", "sm", "mm2"], "problems": [{**base, **problem}]}]}

    fused, left = fusable_attentions(match(), graph)
    assert [(a.scores_call, a.output_call, a.causal, a.q_shape) for a in fused] == [(0, 1, True, (2, 4, 16, 16))]
    for problem, reason in [({"dropout": 0.1}, "dropout"), ({"mask_kind": "additive"}, "mask"),
                            ({"window": 8}, "window"), ({"unsupported": "an arbitrary mask"}, "arbitrary"),
                            ({"mask_kind": "causal_bottom_right", "kv_seq": 20}, "bottom-right")]:
        fused, left = fusable_attentions(match(**problem), graph)
        assert not fused and reason in left[0][1], (problem, left)
