"""`torch.compile(model, backend="fact")`: fact.optimize on each graph dynamo captures.

    torch.compile(model, backend="fact")          # precision: the engine's choice from the dtype
    torch.compile(model, backend="fact", options={"precision": "tf32", "work_dir": "out/"})
    torch.compile(model, backend="fact", dynamic=True,
                  options={"dynamic": "batch=1..64,seq=16..512", "dims": "x:batch,seq,_"})

Each dynamo graph (parameters arrive as graph inputs) is exported, discovered, realized and
rewritten like a module given to fact.optimize; the rest of the graph runs eagerly (option
"remainder": "inductor" compiles it, at the graph's first call: fact.compose.guards'
inside_dynamo_compilation; "patterns", "tune" and "verify" are passed on too). A graph that
cannot be composed runs as dynamo captured it. The never-slower check (fact.optimize's
speed_guard) is off inside the backend: it would compile the graph again from inside a
compilation. The reports of every graph compiled by the
backend are kept in `fact.dynamo_backend.reports` (newest last).

A graph that needs gradients (grad mode on and an input, the parameters included, requiring
grad) goes through AOTAutograd (its default partitioner): its forward and its backward graph
are each composed like an inference graph and verified the same way, and both reports are
appended (`report.graph` says which; docs/compose.md, "Training"). A graph with symbolic sizes
trains over their declared ranges (below; docs/compose.md, "Training over declared ranges"),
without the training forms; without a declared or bounded range it runs as dynamo captured it,
with a report saying so.

A graph with symbolic sizes (`dynamic=True`, `torch._dynamo.mark_dynamic`) is planned over
declared ranges (docs/dynamic_shapes.md): option "dynamic" is the range spec, "dims" names the
input dimensions (`INPUT:DIM,DIM,...`, a string or a list; INPUT a forward argument name or a
0-based position among the forward's tensor arguments); without "dims", range i binds dimension
i of every tensor argument whose size there equals the first's. A symbolic dimension without a
declared range takes dynamo's range when it is bounded, else the backend raises ValueError
(fact.dynamo_dynamic). The callable returned takes dynamo's calling convention (the size ints
are dropped). Dynamo specializes a size of 1 unless torch.fx.experimental._config's
backed_size_oblivious is on. Static graphs are optimized at their sizes, as before.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.fx.experimental._config as fx_config
from torch._dynamo.backends.registry import register_backend

from fact.compose import FactReport, optimize
from fact.compose.training import (GRAPHS, GraphCompilers, dynamo_aot_compile,
                                   graph_needs_gradients, refuse_double_backward)
from fact.compose.training_forms import trace_training_forms
from fact.compose.training_module import graph_work_dir
from fact.compose.training_ranges import is_symbolic
from fact.dynamo_dynamic import dynamic_graph, symbol_ranges, within_dynamos_bounds

FORMS_NOT_OVER_RANGES = ("training forms are not traced in over declared ranges: attention and "
                         "norms written out in the model train as written")

reports: list[FactReport] = []

OPTIONS = ("precision", "work_dir", "remainder", "patterns", "tune", "verify", "dynamic", "dims")


@register_backend(name="fact")
def fact_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: dict | None = None, mode: str | None = None) -> Callable:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"backend 'fact': unknown option(s) {', '.join(unknown)} "
                         f"(known: {', '.join(OPTIONS)})")
    if options.get("dims") and not options.get("dynamic"):
        raise ValueError("backend 'fact': 'dims' names dimensions of 'dynamic' ranges; give "
                         "'dynamic' too")
    if graph_needs_gradients(example_inputs):
        return _train(graph_module, example_inputs, options)
    graph = dynamic_graph(graph_module, example_inputs, options.get("dynamic"), options.get("dims"))
    module, inputs = (graph.module, graph.examples) if graph else (graph_module, tuple(example_inputs))
    # the export inside must not add guards to dynamo's frame nor see its size-oblivious sizes
    with torch._guards.tracing(None), fx_config.patch(backed_size_oblivious=False):
        composed = _optimize(module, inputs, options, graph.dynamic_shapes if graph else None)
    reports.append(composed.fact_report)
    return graph.call(composed) if graph else composed


def _optimize(module: torch.nn.Module, inputs: tuple, options: dict, dynamic_shapes: Any,
              work_dir: Any = None):
    """fact.optimize with the backend's options (the never-slower check off), for inference."""
    return optimize(module, inputs, precision=options.get("precision"),
                    work_dir=work_dir or options.get("work_dir"), remainder=options.get("remainder", "eager"),
                    patterns=options.get("patterns"), tune=int(options.get("tune", 0)),
                    verify=bool(options.get("verify", True)), speed_guard=False,
                    dynamic_shapes=dynamic_shapes, training=False,
                    cuda_graphs=False)  # inside dynamo: torch.compile's mode="reduce-overhead" does that


def _train(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict,
           by_argument: dict | None = None, compose: Callable | None = None) -> Callable:
    """A graph that needs gradients: AOTAutograd's forward and backward graphs, each composed
    like an inference graph; both reports go to `reports` (forward, then backward). A graph
    with symbolic sizes is planned over the declared ranges of its symbols (option "dynamic",
    or by_argument: {forward argument position: {dim: Range}}, fact.optimize's declaration;
    fact.compose.training_ranges); one whose sizes have no declared or bounded range runs as
    dynamo captured it (its report says why). compose(graph, inputs, which, dynamic_shapes=None):
    how each graph is composed (default: fact.optimize with the backend's options)."""
    ranges = None
    if is_symbolic(example_inputs):
        try:
            ranges = within_dynamos_bounds(symbol_ranges(graph_module, example_inputs, options.get("dynamic"),
                                                         options.get("dims"), by_argument), example_inputs)
        except ValueError as error:
            report = FactReport(precision=options.get("precision") or "", device="")
            report.leave("module", f"training a graph with symbolic sizes needs their ranges: {error}; "
                                   f"it runs as dynamo captured it", stage="module")
            report.runs = "the dynamo graph"
            reports.append(report)
            return graph_module
    compilers = GraphCompilers(compose or (lambda graph, inputs, which, dynamic_shapes=None: _optimize(
        graph, inputs, options, dynamic_shapes, graph_work_dir(options.get("work_dir"), which))),
        ranges=ranges)
    if ranges is None:
        # The engine's training forms traced in (fact.compose.training_forms), as fact.optimize does.
        with torch._guards.tracing(None), fx_config.patch(backed_size_oblivious=False):
            traced, notes = trace_training_forms(graph_module, tuple(example_inputs),
                                                 graph_work_dir(options.get("work_dir"), "training_forms"),
                                                 options.get("patterns"))
    else:
        traced, notes = graph_module, [FORMS_NOT_OVER_RANGES]
    compiled = dynamo_aot_compile(traced, example_inputs, compilers)
    graph_reports = [compilers.reports()[which] for which in GRAPHS if which in compilers.composed]
    if graph_reports:
        graph_reports[0].notes.extend(notes)
    reports.extend(graph_reports)

    def run(*args: Any) -> Any:
        return refuse_double_backward(compiled(*args))
    run.fact_graphs = dict(compilers.composed)
    return run
