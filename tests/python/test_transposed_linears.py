"""Linears over a transposed input (fact.transposed_linears): nn.MultiheadAttention's packed
in-projection over a batch-first input is exported as the linear over the untransposed rows and
the same transpose, with the same values and the same layout after its contiguous copy; a
linear whose readers need its layout is left as it is; fact.optimize then composes the
in-projection as one GEMM over batch x sequence rows, and the attention still reads the
projection in place."""
from __future__ import annotations

import copy

import pytest
import torch

import fact
from compose_testing import needs_engine_plan
from fact import module_state
from fact.transposed_linears import rewrite_transposed_linears

aten = torch.ops.aten
B, T, E, HEADS = 3, 5, 32, 2


class BatchFirstAttention(torch.nn.Module):
    """A pre-norm self-attention block over [B, T, E] (as torchvision's ViT encoder block)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(E)
        self.attention = torch.nn.MultiheadAttention(E, HEADS, batch_first=True)

    def forward(self, x):
        y = self.norm(x)
        out, _ = self.attention(y, y, y, need_weights=False)
        return x + out


class TransposedLinear(torch.nn.Module):
    """linear(x.transpose(0, 1)) and then what `reader` does with it."""

    def __init__(self, reader):
        super().__init__()
        self.linear = torch.nn.Linear(E, 3 * E)
        self.reader = reader

    def forward(self, x):
        return self.reader(self.linear(x.transpose(0, 1)))


def _exported(module, x):
    program, _ = module_state.export_keeping_state(module, (x,), strict=False)
    return program


def _linears(program) -> list[torch.fx.Node]:
    return [n for n in program.graph.nodes if n.op == "call_function" and n.target is aten.linear.default]


def test_the_in_projection_runs_over_the_untransposed_rows_with_the_same_values():
    torch.manual_seed(0)
    module, x = BatchFirstAttention().eval(), torch.randn(B, T, E)
    program = _exported(module, x)
    [in_projection, out_projection] = _linears(program)
    source = in_projection.args[0]
    assert source.target is aten.layer_norm.default, source.format_node()
    assert tuple(in_projection.meta["val"].shape) == (B, T, 3 * E)
    [permuted] = in_projection.users
    assert permuted.target is aten.permute.default and permuted.args[1] == [1, 0, 2]
    [copy] = [n for n in program.graph.nodes if n.target is aten.contiguous.default
              and tuple(n.meta["val"].shape) == (3, T, B, E)]
    assert copy.meta["val"].is_contiguous() and tuple(copy.meta["val"].shape) == (3, T, B, E)
    as_written = torch.export.export(module, (x,), strict=False)  # the same graph, not rewritten
    torch.manual_seed(1)
    fresh = torch.randn(B, T, E)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(fresh), as_written.module()(fresh), rtol=1e-6, atol=1e-7)


def test_the_rewrite_keeps_the_values_with_a_symbolic_batch():
    torch.manual_seed(0)
    module, x = BatchFirstAttention().eval(), torch.randn(4, T, E)
    batch = torch.export.Dim("batch", min=2, max=64)
    program, _ = module_state.export_keeping_state(module, (x,), strict=False,
                                                   dynamic_shapes=({0: batch},))
    assert _linears(program)[0].args[0].target is aten.layer_norm.default
    as_written = torch.export.export(module, (x,), strict=False, dynamic_shapes=({0: batch},))
    other = torch.randn(7, T, E)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(other), as_written.module()(other), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("reader", [
    lambda y: y.view(T * B, 3 * E),          # a view that needs the transposed layout
    lambda y: y * 2,                         # an op reading the value itself
    lambda y: y,                             # the graph's output
    lambda y: y.unflatten(-1, (3, E)).clone(),  # a copy that keeps the (new) memory order
], ids=["view", "mul", "output", "clone_preserving"])
def test_a_linear_whose_readers_need_its_layout_is_left_alone(reader):
    torch.manual_seed(0)
    module, x = TransposedLinear(reader).eval(), torch.randn(B, T, E)
    program = _exported(module, x)
    [linear] = _linears(program)
    assert linear.args[0].target in (aten.transpose.int, aten.permute.default), linear.format_node()
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), module(x), rtol=0, atol=0)


def test_a_permutation_that_moves_the_last_dim_or_a_strided_source_is_left_alone():
    class Moves(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(T, E)

        def forward(self, x):  # the linear reads the sequence dim: not a row permutation
            return self.linear(x.transpose(1, 2)).contiguous()

    class Strided(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(E, E)

        def forward(self, x):  # the source's rows are not one run
            return self.linear(x[:, ::2].transpose(0, 1)).contiguous()

    for module, x in ((Moves(), torch.randn(B, T, E)), (Strided(), torch.randn(B, 2 * T, E))):
        program = _exported(module.eval(), x)
        [linear] = _linears(program)
        assert linear.args[0].target in (aten.transpose.int, aten.permute.default)


def test_rewriting_a_graph_without_such_linears_changes_nothing():
    module, x = TransposedLinear(lambda y: y.view(T * B, 3 * E)).eval(), torch.randn(B, T, E)
    program = _exported(module, x)
    before = str(program.graph)
    assert rewrite_transposed_linears(program.graph_module) == []
    assert str(program.graph) == before


@needs_engine_plan
def test_optimize_composes_the_in_projection_as_one_gemm(tmp_path):
    torch.manual_seed(0)
    module, x = BatchFirstAttention().eval(), torch.randn(B, T, E)
    composed = fact.optimize(module, (x,), "strict", remainder="eager", work_dir=tmp_path)
    summaries = [call.summary for entry in composed.fact_report.composed for call in entry.calls]
    assert f"gemm_bias {B * T}x{3 * E}x{E} float32" in summaries, summaries
    [attention] = [e for e in composed.fact_report.composed if e.rule == "attention"]
    assert "contiguous" in attention.nodes, attention.nodes  # the copy is read through
    torch.manual_seed(1)
    fresh = torch.randn(B, T, E)
    with torch.no_grad():
        torch.testing.assert_close(composed(fresh), module(fresh), rtol=1e-5, atol=1e-5)


@needs_engine_plan
def test_training_through_the_rewritten_in_projection_matches_float64_gradients(tmp_path):
    torch.manual_seed(0)
    model = BatchFirstAttention()
    original = copy.deepcopy(model)
    x = torch.randn(B, T, E)
    composed = fact.optimize(model.train(), (x,), "strict", work_dir=tmp_path,
                             remainder="eager", speed_guard=False)
    forward = [call.summary for entry in composed.fact_report.forward.composed for call in entry.calls]
    assert any(summary.startswith(f"gemm_bias {B * T}x{3 * E}x{E}") for summary in forward), forward
    composed(x).square().mean().backward()
    reference = copy.deepcopy(original).double()
    reference(x.double()).square().mean().backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        error = ((got.grad.double() - want.grad).norm() / want.grad.norm()).item()
        assert error <= 1e-5, (name, error)


@needs_engine_plan
def test_pytorch_transformer_batch_first_composes_and_matches_float64(tmp_path):
    """nn.Transformer (encoder and decoder, self- and cross-attention, batch_first): the packed
    in-projections run over the untransposed rows; the cross-attention's query projection, read
    through a `view`, keeps its layout; the output matches float64."""
    torch.manual_seed(0)
    model = torch.nn.Transformer(d_model=E, nhead=HEADS, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=2 * E, dropout=0.0, batch_first=True).eval()
    src, tgt = torch.randn(B, T, E), torch.randn(B, T + 2, E)
    composed = fact.optimize(model, (src, tgt), "strict", remainder="eager", work_dir=tmp_path)
    summaries = [call.summary for entry in composed.fact_report.composed for call in entry.calls]
    assert f"gemm_bias {B * T}x{3 * E}x{E} float32" in summaries, summaries          # encoder self
    assert f"gemm_bias {B * (T + 2)}x{3 * E}x{E} float32" in summaries, summaries    # decoder self
    assert f"gemm_bias {B * T}x{2 * E}x{E} float32" in summaries, summaries          # memory's k, v
    torch.manual_seed(1)
    fresh = (torch.randn(B, T, E), torch.randn(B, T + 2, E))
    with torch.no_grad():
        want = copy.deepcopy(model).double()(*(x.double() for x in fresh))
        error = ((composed(*fresh).double() - want).norm() / want.norm()).item()
    assert error < 1e-5, error
