"""Linears whose rows are transposed back afterwards (fact.transposed_linear_outputs):
nn.MultiheadAttention's out-projection over a batch-first input is exported as the linear over
the heads merged in [B, T, E] order, with the same values; the residual stream behind it is then
contiguous, so fact.optimize fuses the residual adds into the out-projection and the MLP's second
GEMM; a graph whose later nodes need the transposed layout is left as it is."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

import fact
from compose_testing import needs_engine_plan
from fact import module_state
from fact.transposed_linear_outputs import rewrite_transposed_linear_outputs

aten = torch.ops.aten
B, T, E, HEADS = 3, 5, 32, 2


class EncoderBlock(torch.nn.Module):
    """torchvision's ViT encoder block: pre-norm batch-first self-attention, then an MLP, each
    with its residual add (the attention's output first, as torchvision writes it)."""

    def __init__(self):
        super().__init__()
        self.norm_1 = torch.nn.LayerNorm(E)
        self.attention = torch.nn.MultiheadAttention(E, HEADS, batch_first=True)
        self.norm_2 = torch.nn.LayerNorm(E)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(E, 4 * E), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(4 * E, E), torch.nn.Dropout(0.1))

    def forward(self, x):
        y = self.norm_1(x)
        y, _ = self.attention(y, y, y, need_weights=False)
        x = y + x
        return x + self.mlp(self.norm_2(x))


class Stack(torch.nn.Module):
    """Two blocks and what reads their output: by default a class-token head (as a ViT)."""

    def __init__(self, reader=None):
        super().__init__()
        self.blocks = torch.nn.Sequential(EncoderBlock(), EncoderBlock())
        self.head = torch.nn.Linear(E, 10)
        self.reader = reader

    def forward(self, x):
        x = self.blocks(x)
        return self.head(x[:, 0]) if self.reader is None else self.reader(x)


def _exported(module, x):
    program, _ = module_state.export_keeping_state(module, (x,), strict=False)
    return program


def _out_projections(program) -> list[torch.fx.Node]:
    return [n for n in program.graph.nodes if n.op == "call_function" and n.target is aten.linear.default
            and tuple(n.meta["val"].shape) == (B, T, E) and "out_proj" in str(n.args[1])]


def test_the_out_projection_reads_heads_merged_in_batch_first_order_with_the_same_values():
    torch.manual_seed(0)
    module, x = Stack().eval(), torch.randn(B, T, E)
    program = _exported(module, x)
    projections = _out_projections(program)
    assert len(projections) == 2, program.graph
    for projection in projections:
        merged = projection.args[0]
        assert merged.target is aten.view.default and list(merged.args[1]) == [B, T, E]
        assert merged.args[0].target is aten.contiguous.default
        assert merged.args[0].args[0].target is aten.transpose.int
        assert projection.meta["val"].is_contiguous()
    transposed_outputs = [n for n in program.graph.nodes
                          if n.op == "call_function" and n.target is aten.transpose.int
                          and n.args[0].target is aten.view.default
                          and n.args[0].args[0].target is aten.linear.default]
    assert not transposed_outputs, transposed_outputs
    # every later residual add now sees the stream in [B, T, E] order
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is aten.add.Tensor:
            assert node.meta["val"].is_contiguous(), node.format_node()
    as_written = torch.export.export(module, (x,), strict=False)
    torch.manual_seed(1)
    fresh = torch.randn(B, T, E)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(fresh), as_written.module()(fresh), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(program.module()(fresh), module(fresh), rtol=1e-5, atol=1e-6)


def test_a_graph_whose_output_would_change_its_strides_is_left_alone():
    """The stream itself is the graph's output: its (transposed) strides are what the caller
    gets, so the last block's out-projection is not rewritten (the first block's may be: the
    second block's residual add takes its own attention's layout again)."""
    torch.manual_seed(0)
    module, x = Stack(lambda x: x).eval(), torch.randn(B, T, E)
    program = _exported(module, x)
    assert len(_out_projections(program)) <= 1
    as_written = torch.export.export(module, (x,), strict=False)
    with torch.no_grad():
        got, want = program.module()(x), as_written.module()(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert got.stride() == want.stride() and not want.is_contiguous()


def test_rewriting_a_graph_without_such_linears_changes_nothing():
    module, x = torch.nn.Sequential(torch.nn.Linear(E, E), torch.nn.ReLU()).eval(), torch.randn(B, T, E)
    program = torch.export.export(module, (x,), strict=False)
    before = str(program.graph)
    assert rewrite_transposed_linear_outputs(program.graph_module) == []
    assert str(program.graph) == before


@needs_engine_plan
def test_optimize_fuses_the_residual_adds_into_the_out_projection_and_the_mlp(tmp_path):
    torch.manual_seed(0)
    module, x = Stack().eval(), torch.randn(B, T, E)
    composed = fact.optimize(module, (x,), "strict", remainder="eager", work_dir=tmp_path)
    residual_gemms = [call.summary for entry in composed.fact_report.composed for call in entry.calls
                      if call.summary.split()[0].endswith("residual")]
    # per block: the out-projection (+ bias + residual) and the MLP's second GEMM, each one
    # product over the B·T rows (the out-projection stops at the head merge's copy: reading
    # through it, the attention's [T, B] output order would split the rows into B products)
    assert len(residual_gemms) == 4, [e.rule for e in composed.fact_report.composed]
    assert sum(s.startswith(f"gemm_bias_residual {B * T}x{E}x{E}") for s in residual_gemms) == 2, residual_gemms
    for attention in [e for e in composed.fact_report.composed if e.rule == "attention"]:
        assert any(node.startswith("contiguous") for node in attention.nodes), attention.nodes  # writes the merge
    torch.manual_seed(1)
    fresh = torch.randn(B, T, E)
    with torch.no_grad():
        torch.testing.assert_close(composed(fresh), module(fresh), rtol=1e-5, atol=1e-5)


@needs_engine_plan
def test_torchvision_vit_fuses_both_residual_adds_of_every_block(tmp_path):
    """The whole torchvision VisionTransformer (corpus/whole_models.py, CPU sizes): after the two
    MHA rewrites every encoder block's out-projection and second MLP GEMM absorb their residual
    adds, and the composed model stays within the bf16 bound of its float64 run."""
    pytest.importorskip("torchvision")
    from fact.conformance.corpus import float64_output, load_file, output_bound, quiet_torch, relative_error
    whole = load_file(Path(__file__).resolve().parents[2] / "corpus" / "whole_models.py")
    spec = whole.MODELS["torchvision_vit"]
    model = spec.build().to(torch.bfloat16).eval()
    example = tuple(x.to(torch.bfloat16) for x in spec.inputs(spec.batch, 1))
    with quiet_torch(), torch.no_grad():
        composed = fact.optimize(model, example, work_dir=tmp_path, remainder="eager")
    rules = [entry.rule for entry in composed.fact_report.composed]
    layers = spec.sizes["num_layers"]
    assert rules.count("gemm_bias_residual") == layers, rules  # out-projections, one product each
    down_residuals = [entry for entry in composed.fact_report.composed if entry.rule.startswith("mlp_")
                      and entry.calls[-1].summary.split()[0].endswith("_residual")]
    assert len(down_residuals) == layers, rules
    fresh = tuple(x.to(torch.bfloat16) for x in spec.inputs(spec.batch, 2))
    with quiet_torch(), torch.no_grad():
        got = spec.outputs(composed(*fresh))
        want = spec.outputs(model(*fresh))
    reference = spec.outputs(float64_output(model, fresh))
    for key, ref in reference.items():
        bound = output_bound("native", relative_error(want[key], ref))
        assert relative_error(got[key], ref) <= bound, key


@needs_engine_plan
def test_training_through_the_rewritten_out_projection_matches_float64_gradients(tmp_path):
    torch.manual_seed(0)
    model = Stack()
    for module in model.modules():  # the same (no) dropout in the composed and the float64 run
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    original = copy.deepcopy(model)
    x = torch.randn(B, T, E)
    composed = fact.optimize(model.train(), (x,), "strict", work_dir=tmp_path,
                             remainder="eager", speed_guard=False)
    forward = [call.summary for entry in composed.fact_report.forward.composed for call in entry.calls]
    assert sum(summary.startswith(f"gemm_bias {B * T}x{E}x{E}") for summary in forward) == 2, forward
    composed(x).square().mean().backward()
    reference = copy.deepcopy(original).double().train()
    reference(x.double()).square().mean().backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        error = ((got.grad.double() - want.grad).norm() / want.grad.norm()).item()
        assert error <= 1e-5, (name, error)
