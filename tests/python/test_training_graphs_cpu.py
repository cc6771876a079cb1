"""CUDA graphs for modules composed for training (fact.compose.training_graphs) where no GPU
runs: off by default with the reason, asked for on CPU inputs reports why each graph is not
one and trains as without, and the Python work a replay would skip keeps a graph out."""
from __future__ import annotations

import types

import torch

from compose_testing import needs_engine_plan
from fact.compose.training_graphs import TrainingGraphs, remainder_without_guards
from test_training_cpu import (assert_gradients_match_float64, loss_of, optimize_for_training,
                               tiny_mlp)


@needs_engine_plan
def test_training_graphs_are_off_by_default_with_the_reason(tmp_path):
    model, x = tiny_mlp()
    report = optimize_for_training(model, x, tmp_path).fact_report
    assert report.cuda_graphs.startswith("off (the default in training"), report.cuda_graphs
    assert "cuda_graphs=True" in report.cuda_graphs


@needs_engine_plan
def test_asked_for_on_cpu_inputs_each_graph_says_why_and_trains_as_without(tmp_path):
    model, x = tiny_mlp()
    original = __import__("copy").deepcopy(model)
    composed = optimize_for_training(model, x, tmp_path, cuda_graphs=True)
    line = composed.fact_report.cuda_graphs
    assert line == ("off (forward: CUDA graphs need CUDA inputs; backward: CUDA graphs need "
                    "CUDA inputs)"), line
    fresh = torch.randn_like(x)
    loss_of(composed(fresh)).backward()
    assert_gradients_match_float64(model, original, fresh)


def test_python_work_a_replay_would_skip_keeps_a_graph_out():
    graphs = TrainingGraphs(user_inputs=1)
    run = lambda args: args  # noqa: E731 - stands in for a composed graph
    info = {"which": "forward", "fixed": 2, "inputs": [], "reason": None}
    derived = types.SimpleNamespace(_derived=["packed weight"], _state=[])
    assert graphs.wrap(dict(info), run, derived) is run
    assert graphs.reasons["forward"].startswith("its derived operands are recomputed")
    # the backward of a forward that is not a graph is not one either
    backward = dict(info, which="backward")
    assert graphs.wrap(backward, run, types.SimpleNamespace(_derived=[], _state=[])) is run
    assert graphs.reasons["backward"] == "the forward graph is not a CUDA graph"
    assert graphs.describe().startswith("off (forward: its derived operands")


def test_the_forward_graphs_static_inputs_are_the_lifted_parameters():
    """AOTAutograd puts the module's parameters and buffers in front of the user's inputs: those
    are the forward graph's static inputs (read in place by every replay)."""
    graphs = TrainingGraphs(user_inputs=1)
    graph = torch.fx.symbolic_trace(torch.nn.Linear(4, 4))
    info = graphs.inspect("forward", graph, [torch.zeros(4, 4), torch.zeros(4), torch.zeros(2, 4)])
    assert info["fixed"] == 2
    assert info["reason"] == "CUDA graphs need CUDA inputs"


def test_a_composed_graph_empties_its_argument_list_as_the_boxed_convention_asks():
    """AOTAutograd hands each compiled graph one list of arguments; PyTorch's CUDA graph trees
    check after a warm-up run that the graph emptied it (so each input can be freed once read)."""
    from fact.compose.training import _boxed

    arguments = [torch.ones(2), torch.full((2,), 3.0)]
    result = _boxed(lambda a, b: a * b)(arguments)
    assert arguments == []
    assert torch.equal(result, torch.full((2,), 3.0))


def test_the_remainder_is_compiled_by_compile_fx_with_the_graph_left_as_it_was():
    """Before a graph is recorded, the torch.compile'd remainder is replaced by compile_fx's
    compilation of the composed graph (no dynamo frame: no guard to fail inside a recording);
    the composed graph itself keeps its calling convention (its eager fallback)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    x = torch.randn(3, 8)
    graph_module = torch.export.export(model, (x,)).module()
    code = graph_module.code
    composed = types.SimpleNamespace(graph_module=graph_module, _compiled=object())
    assert remainder_without_guards(composed, [x]) == ""
    assert graph_module.code == code
    fresh = torch.randn(3, 8)
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        torch.testing.assert_close(composed._compiled(fresh), model(fresh))
        torch.testing.assert_close(graph_module(fresh), model(fresh))
    assert not torch._dynamo.utils.counters["frames"], "the compiled remainder ran through dynamo"

    eager = types.SimpleNamespace(graph_module=graph_module, _compiled=None)
    assert remainder_without_guards(eager, [x]) == "" and eager._compiled is None
    kept = object()
    failing = types.SimpleNamespace(graph_module=graph_module, _compiled=kept)
    why = remainder_without_guards(failing, [torch.randn(3, 5)])  # inputs the graph cannot take
    assert why.startswith("the remainder stays torch.compile'd (compile_fx failed: "), why
    assert failing._compiled is kept
