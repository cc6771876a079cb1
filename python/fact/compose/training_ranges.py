"""Training over declared ranges: AOTAutograd's forward and backward graphs of a graph with
symbolic sizes, each planned over the ranges of its symbols (docs/compose.md, "Training over
declared ranges").

    graph = aot_range_graph(aot_graph, fake_inputs, ranges)   # ranges: {sympy symbol: Range}
    composed = fact.optimize(graph.module, graph.examples, dynamic_shapes=graph.dynamic_shapes)
    run = graph.call(composed)            # AOTAutograd's calling convention, sizes included

An AOT graph takes sizes as int inputs (a symbol, or a product such as s0*s1) and tensors whose
dimensions may be products of symbols: a saved activation flattened to (s0*s1, C) for a GEMM.
torch.export declares plain dimensions only, so such an input is planned split, one dimension
per factor ((s0, s1, C)), and viewed back to its flat shape inside the planned graph; a call
views the runtime tensor split (a dimension of one stride always splits). The graph's size
outputs (the forward hands the backward its sizes) are not planned: a call computes them from
the symbols' sizes, which it reads from the inputs. A dimension or size that is not a product
of symbols and integers (s0 + 1, s0 // 2) raises ValueError: the graph then runs as traced.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import sympy
import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from fact.compose.inputs import example_tensor
from fact.dynamo_dynamic import hint_values, size_hint


def is_symbolic(values: Sequence[Any]) -> bool:
    """Whether a graph's example inputs carry symbolic sizes (a SymInt, or a tensor with one)."""
    return any(isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and any(
        isinstance(s, torch.SymInt) and not s.node.expr.is_number for s in v.shape)) for v in values)


def _expr(size: Any) -> Any:
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def factors(expr: Any, where: str) -> list:
    """A size as a product: the symbols (repeated for powers) and one integer (omitted when 1).
    ValueError for anything else."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return [int(expr)]
    result: list = []
    constant = 1
    for part in sympy.Mul.make_args(expr):
        if part.is_Integer:
            constant *= int(part)
        elif part.is_Symbol:
            result.append(part)
        elif part.is_Pow and part.base.is_Symbol and part.exp.is_Integer and int(part.exp) > 0:
            result.extend([part.base] * int(part.exp))
        else:
            raise ValueError(f"{where} is {expr}: only products of declared sizes can be planned")
    return result + ([constant] if constant != 1 else [])


@dataclass
class RangeGraph:
    """What fact.optimize gets for one AOT graph with symbolic sizes, and how it is called."""
    module: torch.fx.GraphModule   # the graph over its tensor inputs only, split where flat
    examples: tuple                # real tensors at the hint sizes, split shapes
    dynamic_shapes: tuple          # {dim: Range} (or None) per tensor input
    tensor_positions: list         # the graph input position of each tensor input
    split: dict                    # tensor input k -> its dimensions' factors (only when split)
    outputs: list                  # per graph output: ("tensor", j) | ("size", factors) | ("value", v)
    sources: dict                  # symbol -> ("int", position) | ("dim", position, dim)

    def sizes(self, args: Sequence[Any]) -> dict:
        """The symbols' sizes in a call."""
        return {symbol: int(args[source[1]]) if source[0] == "int" else int(args[source[1]].shape[source[2]])
                for symbol, source in self.sources.items()}

    def call(self, composed: Callable) -> Callable:
        """The callable AOTAutograd runs: takes every graph input, views the split ones, runs
        the composed graph on the tensors and puts the size outputs back."""
        positions, split, outputs = self.tensor_positions, self.split, self.outputs

        def value(size_factors: list, sizes: dict) -> int:
            result = 1
            for factor in size_factors:
                result *= sizes[factor] if isinstance(factor, sympy.Symbol) else factor
            return result

        def run(*args: Any) -> Any:
            sizes = self.sizes(args) if split or any(o[0] == "size" for o in outputs) else {}
            tensors = []
            for k, position in enumerate(positions):
                arg = args[position]
                if k in split:
                    arg = arg.view([value([f], sizes) for dim in split[k] for f in dim])
                tensors.append(arg)
            results = composed(*tensors)
            results = results if isinstance(results, (tuple, list)) else (results,)
            return tuple(results[o[1]] if o[0] == "tensor" else value(o[1], sizes) if o[0] == "size"
                         else o[1] for o in outputs)
        run.fact_composed = composed
        return run


def _symbol_hints(values: Sequence[Any]) -> dict:
    """{symbol: its hint size} over the shape environment of the graph's symbolic inputs."""
    for value in values:
        sizes = [value] if isinstance(value, torch.SymInt) else list(value.shape) \
            if isinstance(value, torch.Tensor) else []
        for size in sizes:
            if isinstance(size, torch.SymInt):
                return {symbol: int(hint) for symbol, hint in hint_values(size.node.shape_env).items()}
    return {}


def _meta(node: torch.fx.Node, example: Any) -> Any:
    value = node.meta.get("val")
    return example if value is None else value


def _real_split_example(value: torch.Tensor, split_shape: list) -> torch.Tensor:
    """A real tensor of the fake `value`'s hint shape, strides, dtype and device, viewed to
    `split_shape`."""
    tensor = example_tensor([size_hint(s) for s in value.shape], [size_hint(s) for s in value.stride()],
                            value.dtype, value.device)
    with unset_fake_temporarily():     # a real view, not one of the trace's fake mode
        return tensor.view(split_shape)


def aot_range_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                    ranges: dict) -> RangeGraph:
    """The RangeGraph of an AOT graph whose sizes are products of the symbols in `ranges`
    ({sympy symbol: Range}, the dynamo graph's declared ranges). ValueError when a size is not
    such a product, a symbol has no declared range, or a symbol's size cannot be read from the
    graph's inputs."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    values = [_meta(n, e) for n, e in zip(placeholders, example_inputs)]
    tensor_positions = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    sources: dict = {}
    split: dict = {}
    shapes: list = []                         # per tensor input: its split dims (factor per dim)
    for k, position in enumerate(tensor_positions):
        value = values[position]
        dims = [factors(_expr(s), f"dimension {d} of input '{placeholders[position].name}'")
                for d, s in enumerate(value.shape)]
        if any(len(f) > 1 for f in dims):
            split[k] = dims
        flat = [f for dim in dims for f in (dim or [1])]
        shapes.append(flat)
        for d, size in enumerate(value.shape):
            expr = _expr(size)
            if expr.is_Symbol:
                sources.setdefault(expr, ("dim", position, d))
    for position, value in enumerate(values):
        if isinstance(value, torch.SymInt) and value.node.expr.is_Symbol:
            sources.setdefault(value.node.expr, ("int", position))
    for k, flat in enumerate(shapes):
        for factor in flat:
            if isinstance(factor, sympy.Symbol) and factor not in ranges:
                raise ValueError(f"the size {factor} of input '{placeholders[tensor_positions[k]].name}' "
                                 f"has no declared range")
    used = {f for flat in shapes for f in flat if isinstance(f, sympy.Symbol)}
    missing = sorted((str(s) for s in used if s not in sources), key=str)
    if missing and split:
        raise ValueError(f"the sizes {', '.join(missing)} are not inputs of the graph: a flat input "
                         f"cannot be split")

    # The planned graph: split tensors in, viewed flat, the AOT graph, its tensor outputs out.
    root = torch.nn.Module()
    root.graph_module = graph_module
    graph = torch.fx.Graph()
    tensors = [graph.placeholder(f"input_{k}") for k in range(len(tensor_positions))]
    carrier: dict = {}                        # symbol -> (k, split dim)
    for k, flat in enumerate(shapes):
        for d, factor in enumerate(flat):
            if isinstance(factor, sympy.Symbol):
                carrier.setdefault(factor, (k, d))
    size_nodes: dict = {}

    def size_node(size_factors: list) -> Any:
        node: Any = None
        for factor in size_factors:
            if isinstance(factor, sympy.Symbol):
                if factor not in carrier:
                    raise ValueError(f"the size {factor} is carried by no tensor input")
                if factor not in size_nodes:
                    k, d = carrier[factor]
                    size_nodes[factor] = graph.call_method("size", (tensors[k], d))
                term = size_nodes[factor]
            else:
                term = int(factor)
            node = term if node is None else graph.call_function(operator.mul, (node, term))
        return 1 if node is None else node

    args: list = []
    for position, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            k = tensor_positions.index(position)
            if k in split:
                args.append(graph.call_method("view", (tensors[k], [size_node(f) for f in split[k]])))
            else:
                args.append(tensors[k])
        elif isinstance(value, torch.SymInt):
            args.append(size_node(factors(_expr(value), f"size input '{placeholders[position].name}'")))
        else:
            args.append(value)
    result = graph.call_module("graph_module", tuple(args))
    output_node = next(n for n in graph_module.graph.nodes if n.op == "output")
    returned = output_node.args[0]
    returned = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    outputs: list = []
    tensor_outputs: list = []
    for index, item in enumerate(returned):
        value = item.meta.get("val") if isinstance(item, torch.fx.Node) else item
        if isinstance(item, torch.fx.Node) and isinstance(value, torch.Tensor):
            outputs.append(("tensor", len(tensor_outputs)))
            tensor_outputs.append(graph.call_function(operator.getitem, (result, index)))
        elif isinstance(value, torch.SymInt):
            size_factors = factors(_expr(value), f"output {index}")
            missing = [str(f) for f in size_factors if isinstance(f, sympy.Symbol) and f not in sources]
            if missing:
                raise ValueError(f"output {index} is the size {value}, whose {', '.join(missing)} "
                                 f"is not an input of the graph")
            outputs.append(("size", size_factors))
        elif isinstance(value, (int, float, bool)) or value is None:
            outputs.append(("value", value))
        else:
            raise ValueError(f"output {index} of the graph is {type(value).__name__}")
    graph.output(tuple(tensor_outputs))
    module = torch.fx.GraphModule(root, graph)

    hints = _symbol_hints(values)
    examples = tuple(_real_split_example(values[p], [hints[f] if isinstance(f, sympy.Symbol) else f
                                                     for f in shapes[k]])
                     for k, p in enumerate(tensor_positions))
    dynamic_shapes = tuple({d: ranges[f] for d, f in enumerate(flat) if isinstance(f, sympy.Symbol)} or None
                           for flat in shapes)
    return RangeGraph(module, examples, dynamic_shapes, tensor_positions, split, outputs,
                      {s: sources[s] for s in sources})
