"""`fact.optimize(model.train(), inputs, dynamic_shapes=...)`: a module that trains at every size
of its declared ranges (docs/compose.md, "Training over declared ranges").

TorchDynamo traces the module with the declared dimensions symbolic (maybe_mark_dynamic: a
guard the trace adds inside a range makes dynamo trace again at the sizes it excludes); each
graph that needs gradients goes through AOTAutograd, and its forward and backward graphs are
planned over the ranges of their symbols (fact.dynamo_backend's training path,
fact.compose.training_ranges): one forward and one backward graph serve every size. The first
call is made here, on the example inputs, with the module's state and the random stream kept,
so that both graphs are composed (and verified) before this returns.

`RangeTrainingComposedModule` runs them for calls inside the ranges (each declared dimension
inside its range, the same name the same size, every other dimension, dtype and device as the
example's) and the original module for anything else, with one warning per reason.
"""
from __future__ import annotations

import types
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from fact.compose.module import ComposedModule
from fact.compose.signature import _signature
from fact.compose.training import GRAPHS, graph_needs_gradients, training_report
from fact.compose.training_memory import state_kept
from fact.compose.training_module import TrainingComposedModule, autograd_state, within_memory_rule
from fact.dynamic_ranges import export_dynamic_shapes
from fact.report import FactReport
from fact.symbolic_sizes import BucketTable


def _flat_leaves_function(module: torch.nn.Module) -> Callable:
    """`module(*args)` with its outputs flattened to a tuple of leaves (AOTAutograd's contract),
    as a function with a code object of its own: TorchDynamo keeps compiled graphs per code
    object, so each composed module has its own cache (and its own recompile limit) and none is
    reset for another."""
    def flat(*args: Any) -> tuple:
        return tuple(pytree.tree_leaves(module(*args)))
    return types.FunctionType(flat.__code__.replace(), flat.__globals__, flat.__name__,
                              flat.__defaults__, flat.__closure__)


class RangeTrainingComposedModule(TrainingComposedModule):
    """A module composed for training over declared ranges (see the module docstring)."""

    def __init__(self, original: torch.nn.Module, trainable: Callable, spec: Any,
                 example_inputs: tuple, declared: dict, state: tuple, report: FactReport,
                 graphs: dict, *, strict: bool = False):
        super().__init__(original, trainable, spec, _signature(example_inputs), state, report,
                         graphs, strict=strict)
        self._declared = dict(declared)        # {(input index, dim): Range}
        self._examples = tuple((x.dim(), x.dtype, x.device, tuple(x.shape)) if isinstance(x, torch.Tensor)
                               else None for x in example_inputs)
        # never_slower_in_training's choice per bucket tuple where the composed graphs were slower
        self.__dict__["_bucket_table"] = None
        self.__dict__["_bucket_fallbacks"] = {}

    def declared_ranges(self) -> dict:
        """{(input index, dim): Range} as declared."""
        return dict(self._declared)

    def set_bucket_fallbacks(self, table: BucketTable, fallbacks: dict) -> None:
        """{bucket row of `table`: what runs the calls whose declared sizes fall in it}."""
        self.__dict__["_bucket_table"] = table
        self.__dict__["_bucket_fallbacks"] = dict(fallbacks)

    def _speed_fallback(self, args: tuple) -> Callable | None:
        if not self._bucket_fallbacks:
            return None
        sizes = {declared.name: int(args[index].shape[dim]) for (index, dim), declared in self._declared.items()}
        table = self._bucket_table
        return self._bucket_fallbacks.get(table.index(tuple(sizes[name] for name in table.names)))

    def outside_reason(self, args: tuple) -> str | None:
        """Why a call is outside the declared ranges, None when it is inside."""
        if len(args) != len(self._examples):
            return f"{len(args)} inputs, composed for {len(self._examples)}"
        sizes: dict = {}
        for index, (arg, example) in enumerate(zip(args, self._examples)):
            if example is None:
                continue
            rank, dtype, device, shape = example
            if not isinstance(arg, torch.Tensor) or arg.dim() != rank or arg.dtype != dtype \
                    or arg.device != device:
                return f"input {index} is not a {dtype} tensor of rank {rank} on {device}"
            for dim in range(rank):
                declared = self._declared.get((index, dim))
                size = int(arg.shape[dim])
                if declared is None:
                    if size != shape[dim]:
                        return f"input {index} dim {dim} is {size}, composed for {shape[dim]}"
                elif not declared.allows(size):
                    return f"{declared.name}={size} is not {declared.describe_allowed()}"
                elif sizes.setdefault(declared.name, size) != size:
                    return f"{declared.name} is {sizes[declared.name]} and {size}"
        return None


def optimize_for_training_over_ranges(module: torch.nn.Module, example_inputs: tuple,
                                      dynamic_shapes: Any, compose_graph: Callable, *,
                                      strict: bool = False, precision: str = "") -> ComposedModule:
    """The module traced by TorchDynamo with its declared dimensions symbolic, each graph's
    forward and backward composed over the ranges by `compose_graph(graph, inputs, which,
    dynamic_shapes=None)`. ValueError for a malformed declaration (fact.dynamic_ranges). A
    module whose graphs cannot be traced or composed, or whose composed forward saves more for
    the backward than the original (training_memory), comes back with nothing composed and the
    reason; the original trains."""
    import fact.dynamo_backend as dynamo_backend

    _, declared = export_dynamic_shapes(dynamic_shapes, module, example_inputs)
    device = next((str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)), "cpu")
    by_argument: dict = {}
    inputs = tuple(x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                   for x in example_inputs)
    for (index, dim), declared_range in declared.items():
        by_argument.setdefault(index, {})[dim] = declared_range
        # maybe_mark_dynamic: a guard the trace adds inside the range (minGPT's mask slice adds
        # seq != 64 for a 64-long mask) makes dynamo trace again at those sizes, not fail
        torch._dynamo.maybe_mark_dynamic(inputs[index], dim)
    first = len(dynamo_backend.reports)
    composed_graphs: dict = {}                 # "forward"/"backward" -> ComposedModule (first graph)

    def backend(graph_module: torch.fx.GraphModule, graph_inputs: list) -> Callable:
        if graph_needs_gradients(graph_inputs):
            run = dynamo_backend._train(graph_module, graph_inputs, {"precision": precision},
                                        by_argument, compose=compose_graph)
            for which, graph in getattr(run, "fact_graphs", {}).items():
                composed_graphs.setdefault(which, graph)
            return run
        return graph_module                    # a graph that needs no gradient runs as captured

    def uncomposed(reason: str) -> ComposedModule:
        report = FactReport(precision=precision, device=device, capture="TorchDynamo + AOTAutograd")
        report.leave("module", reason, stage="module")
        report.runs = "the original eagerly"
        return ComposedModule(module, None, None, report)

    trainable = torch.compile(_flat_leaves_function(module), backend=backend, dynamic=None)
    try:
        with state_kept(module, inputs), torch.enable_grad():
            spec = pytree.tree_flatten(module(*inputs))[1]
            trainable(*inputs)                 # composes the forward and backward graphs now
    except Exception as error:  # noqa: BLE001 - any tracing failure: the original trains
        first_line = (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]
        return uncomposed(f"cannot be traced for training over the declared ranges ({first_line})")
    graph_reports = dynamo_backend.reports[first:]
    by_graph = {r.graph: r for r in graph_reports if r.graph in GRAPHS}
    if not by_graph:
        reasons = "; ".join(item.reason for r in graph_reports for item in r.left_to_pytorch) \
            or "no graph needs gradients"
        return uncomposed(f"nothing traced for training over the declared ranges: {reasons}")
    report = training_report(by_graph, device)
    report.capture = "TorchDynamo over the declared ranges, then AOTAutograd forward and backward graphs"
    report.runs = "composed forward and backward graphs over the declared ranges (TorchDynamo + AOTAutograd)"
    if len(graph_reports) > len(by_graph):
        report.notes.append(f"TorchDynamo traced {len(graph_reports)} graph reports (graph breaks); "
                            f"the first forward and backward are shown")
    report.cuda_graphs = "off (training over declared ranges)"
    composed = RangeTrainingComposedModule(module, trainable, spec, example_inputs, declared,
                                           autograd_state(module, example_inputs), report,
                                           composed_graphs, strict=strict)
    return within_memory_rule(module, composed, example_inputs)
