"""Composed modules that train: AOTAutograd splits a module (or a dynamo graph) into a forward
and a backward ATen graph, and each is planned and composed like an inference graph
(docs/compose.md, "Training").

    needs_gradients(module, inputs)      fact.optimize's rule: compose for training or not
    graph_needs_gradients(inputs)        the dynamo backend's rule
    GraphCompilers(compose_graph)        AOTAutograd's forward and backward compilers
    aot_compile(module, inputs, compilers)   the trainable callable (forward and backward composed)
    refuse_double_backward(outputs)      a clear error for create_graph=True through the graphs

Each compiler hands its graph, with real example tensors of the fake inputs' shapes, strides,
dtypes and devices, to `compose_graph` (fact.optimize of an inference graph: capture, engine
plan, apply_plan with the float64 verification of every replacement), so a GEMM whose operand
is transposed (the dgrad and wgrad GEMMs of the backward graph) is discovered like any other.
AOT's default partitioner decides what the forward saves for the backward; nothing here adds
a saved tensor. Random ops (dropout's bernoulli) stay PyTorch's and are listed as left to
PyTorch with the reason.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
import torch.fx.experimental._config as fx_config
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import default_partition
from torch._subclasses.fake_tensor import unset_fake_temporarily

from fact.compose.inputs import example_tensor
from fact.compose.training_ranges import aot_range_graph, is_symbolic
from fact.report import FactReport

GRAPHS = ("forward", "backward")

DOUBLE_BACKWARD = ("double backward through fact::launch is not supported: the composed backward "
                   "graph has no backward of its own (create_graph=True); compute higher-order "
                   "gradients with the original module")


def needs_gradients(module: torch.nn.Module, example_inputs: Sequence[Any]) -> bool:
    """fact.optimize's rule: compose for training when grad mode is on and either an example
    input requires grad, or the module is in training mode and one of its parameters requires
    grad. Otherwise (torch.no_grad(), or an eval-mode module given inputs that need no grad)
    the inference composition."""
    if not torch.is_grad_enabled():
        return False
    if any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return True
    return module.training and any(p.requires_grad for p in module.parameters())


def graph_needs_gradients(example_inputs: Sequence[Any]) -> bool:
    """The dynamo backend's rule: grad mode is on and a graph input (dynamo passes the
    parameters as inputs) requires grad."""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                           for x in example_inputs)


def real_like(value: Any) -> Any:
    """A real tensor with `value`'s (a FakeTensor's) shape, strides, dtype and device
    (fact.compose.inputs.example_tensor). Anything else is returned as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    return example_tensor([int(s) for s in value.shape], [int(s) for s in value.stride()],
                          value.dtype, value.device)


@contextlib.contextmanager
def outside_tracing() -> Iterator[None]:
    """Planning and verifying run real tensors: out of AOT's fake mode and dynamo's tracing
    context (the export inside must add no guard to dynamo's frame nor see its size-oblivious
    sizes), with grad off (the graphs are inference graphs to fact.optimize)."""
    with unset_fake_temporarily(), torch._guards.tracing(None), \
            fx_config.patch(backed_size_oblivious=False), torch.no_grad():
        yield


def random_nodes(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The graph's random ops (tagged nondeterministic_seeded: bernoulli, native_dropout, rand)."""
    return [node for node in graph_module.graph.nodes if node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in node.target.tags]


def random_op_scalars(graph_module: torch.fx.GraphModule) -> frozenset:
    """Positions of the graph's inputs that are 0-dim tensors read by random ops only (left to
    PyTorch: no replacement contains them): a fused attention's seed and offset, saved by the
    forward for its backward. The traced graph may put them on the GPU where PyTorch returns
    them on the CPU (memory-efficient attention outside CUDA graph capture), so the composed
    graph's signature leaves their device out."""
    random = set(random_nodes(graph_module))
    positions = set()
    placeholders = [node for node in graph_module.graph.nodes if node.op == "placeholder"]
    for index, node in enumerate(placeholders):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and value.dim() == 0 and node.users \
                and all(user in random for user in node.users):
            positions.add(index)
    return frozenset(positions)


def drop_dead_random_ops(graph_module: torch.fx.GraphModule) -> list[str]:
    """Removes the random ops nothing reads (and what only they read) from a backward graph:
    AOTAutograd's partitioner keeps a forward dropout it copied into the backward graph although
    no gradient reads it; run, it would draw random numbers eager's backward does not draw
    (shifting every later dropout mask) and compute them for nothing. Returns their names."""
    dead = [node.name for node in random_nodes(graph_module) if not node.users]
    if dead:
        graph_module.graph.eliminate_dead_code(is_impure_node=lambda node: node.is_impure(impure_random=False))
        graph_module.recompile()
    return dead


def _boxed(composed: Callable) -> Callable:
    """AOTAutograd's boxed calling convention: one list of arguments, which the callee empties
    (so an input can be freed once it is read; PyTorch's CUDA graph trees check that it was)."""
    def run(args: list) -> Any:
        held = tuple(args)
        args.clear()
        return composed(*held)
    run._boxed_call = True
    return run


class GraphCompilers:
    """AOTAutograd's forward and backward compilers. `compose_graph(graph, real_inputs, which)`
    (which: "forward" or "backward"; keyword dynamic_shapes for a graph planned over declared
    ranges) returns the composed graph (a ComposedModule, inference path); each one is kept in
    `composed[which]`, its report marked with the graph it is for and the graph's random ops
    added to it as left to PyTorch. The backward graph loses its dead random ops first
    (drop_dead_random_ops)."""

    def __init__(self, compose_graph: Callable[..., Any], graphs: Any = None, ranges: dict | None = None):
        """graphs: a fact.compose.training_graphs.TrainingGraphs to replay the composed graphs
        as CUDA graphs where they can be, or None (none). ranges: {sympy symbol: Range} of a
        graph traced with symbolic sizes (fact.compose.training_ranges), or None."""
        self.compose_graph = compose_graph
        self.graphs = graphs
        self.ranges = ranges
        self.composed: dict = {}

    def compiler(self, which: str) -> Callable:
        def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
            dropped = drop_dead_random_ops(graph_module) if which == "backward" else []
            if self.ranges is not None and is_symbolic(example_inputs):
                return self._compile_over_ranges(which, graph_module, example_inputs, dropped)
            inputs = tuple(real_like(x) for x in example_inputs)
            graph_info = self.graphs.inspect(which, graph_module, example_inputs) \
                if self.graphs is not None else None
            with outside_tracing():
                composed = self.compose_graph(graph_module, inputs, which)
            if hasattr(composed, "allow_any_device"):
                composed.allow_any_device(random_op_scalars(graph_module), inputs)
            self._keep(which, graph_module, composed, dropped)
            if graph_info is not None:
                return self.graphs.wrap(graph_info, _boxed(composed), composed)
            return _boxed(composed)
        return compile_graph

    def _compile_over_ranges(self, which: str, graph_module: torch.fx.GraphModule,
                             example_inputs: Sequence[Any], dropped: list) -> Callable:
        """A graph with symbolic sizes, planned over the declared ranges of its symbols; one
        that cannot be (a size that is no product of declared sizes) runs as traced."""
        from fact.compose.module import ComposedModule

        try:
            graph = aot_range_graph(graph_module, example_inputs, self.ranges)
        except ValueError as error:
            device = next((str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)), "")
            report = FactReport(precision="", device=device, capture="AOTAutograd")
            report.leave("graph", f"cannot be planned over the declared ranges: {error}", stage="module")
            report.runs = "the graph as traced"
            self._keep(which, graph_module, ComposedModule(graph_module, None, None, report), dropped)
            return graph_module
        with outside_tracing():
            composed = self.compose_graph(graph.module, graph.examples, which,
                                          dynamic_shapes=graph.dynamic_shapes)
        if hasattr(composed, "allow_any_device"):
            positions = graph.tensor_positions
            composed.allow_any_device(frozenset(positions.index(p) for p in random_op_scalars(graph_module)
                                                if p in positions), graph.examples)
        self._keep(which, graph_module, composed, dropped)
        return _boxed(graph.call(composed))

    def _keep(self, which: str, graph_module: torch.fx.GraphModule, composed: Any, dropped: list) -> None:
        report = composed.fact_report
        report.graph = which
        for node in random_nodes(graph_module):
            report.leave(f"{node.name} ({node.target})",
                         "a random op: PyTorch draws its random numbers, so no replacement "
                         "contains it", stage="random")
        if dropped:
            report.notes.append(f"random ops no gradient reads removed from the backward graph: "
                                f"{', '.join(dropped)}")
        self.composed[which] = composed

    def reports(self) -> dict:
        """{"forward": FactReport, "backward": FactReport} for the graphs compiled so far."""
        return {which: self.composed[which].fact_report for which in GRAPHS if which in self.composed}


def aot_compile(module: torch.nn.Module, example_inputs: Sequence[Any],
                compilers: GraphCompilers) -> Callable:
    """AOTAutograd of `module` (its parameters and buffers lifted as inputs, the very tensors
    of the module) with `compilers`; the backward graph is compiled now, not at the first
    backward, so both reports exist when this returns. The module must return a flat tuple of
    tensors. Raises what tracing raises."""
    with functorch_config.patch(force_non_lazy_backward_lowering=True):
        return aot_module_simplified(module, list(example_inputs),
                                     fw_compiler=compilers.compiler("forward"),
                                     bw_compiler=compilers.compiler("backward"),
                                     partition_fn=default_partition)


def dynamo_aot_compile(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                       compilers: GraphCompilers) -> Callable:
    """The same for a dynamo graph, through dynamo's AOTAutograd backend wrapper."""
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(fw_compiler=compilers.compiler("forward"),
                           bw_compiler=compilers.compiler("backward"),
                           partition_fn=default_partition)
    with functorch_config.patch(force_non_lazy_backward_lowering=True):
        return backend(graph_module, example_inputs)


def _refuse_second_order(grad: torch.Tensor) -> None:
    if torch.is_grad_enabled():
        raise RuntimeError(DOUBLE_BACKWARD)


def refuse_double_backward(outputs: Any) -> Any:
    """Hooks every output that requires grad so that a backward with create_graph=True raises
    DOUBLE_BACKWARD before reaching the composed backward graph (AOTAutograd's own error would
    come only at the second backward); returns `outputs`."""
    for value in (outputs if isinstance(outputs, (list, tuple)) else (outputs,)):
        if isinstance(value, torch.Tensor) and value.requires_grad and value.grad_fn is not None:
            value.register_hook(_refuse_second_order)
    return outputs


def training_report(reports: dict, device: str) -> FactReport:
    """The report of a module composed for training: one FactReport per graph (`forward`,
    `backward`), the module-level fields taken from the forward's."""
    forward = reports.get("forward")
    report = FactReport(precision=forward.precision if forward else "", device=device,
                        capture="AOTAutograd forward and backward graphs (torch.export each)",
                        work_dir=forward.work_dir if forward else "")
    report.forward, report.backward = reports.get("forward"), reports.get("backward")
    report.op_implementation = forward.op_implementation if forward else ""
    report.remainder = forward.remainder if forward else "eager"
    report.runs = "composed forward and backward graphs (AOTAutograd)"
    return report
