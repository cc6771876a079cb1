"""Declared ranges for a dynamo graph with symbolic sizes (`torch.compile(..., dynamic=True)`,
`torch._dynamo.mark_dynamic`): which input dimensions are symbolic, the Range each one gets,
real example inputs at dynamo's hint sizes, and a module that takes the graph's tensor inputs
only (dynamo also passes the sizes as plain ints; they are read back from the tensors).

    graph = dynamic_graph(graph_module, example_inputs, spec, dims)  # None for a static graph
    composed = fact.optimize(graph.module, graph.examples, dynamic_shapes=graph.dynamic_shapes)
    graph.call(composed)  # the callable dynamo runs with the graph's own calling convention

A symbolic dimension gets the declared range bound to it (`spec`/`dims`, docs/dynamic_shapes.md;
without `dims` the default binding over the graph's user tensor inputs), else dynamo's own range
when it is bounded (`mark_dynamic(x, 0, min=1, max=64)`); otherwise ValueError.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fact.dynamic_ranges import Range, bind_ranges

_UNBOUNDED = 2 ** 62


def _meta(node: torch.fx.Node) -> Any:
    value = node.meta.get("example_value")
    return node.meta.get("val") if value is None else value


def _symbol(size: Any) -> Any:
    """The sympy symbol of a symbolic size, None for a static one."""
    if not isinstance(size, torch.SymInt):
        return None
    expr = size.node.expr
    if not expr.is_Symbol:
        if expr.is_number:
            return None
        raise ValueError(f"backend 'fact': an input size is the expression {expr}; only plain "
                         f"symbolic sizes can be declared")
    return expr


def hint_values(shape_env: Any) -> dict:
    """{sympy symbol: the size it was traced at} of a shape environment."""
    return shape_env.backed_var_to_val if hasattr(shape_env, "backed_var_to_val") else shape_env.var_to_val


def size_hint(size: Any) -> int:
    """An int or SymInt size at the sizes it was traced at."""
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        return int(expr) if expr.is_number else int(expr.xreplace(hint_values(size.node.shape_env)))
    return int(size)


def _input_name(node: torch.fx.Node) -> str | None:
    """The forward's argument name of a user input placeholder (None: a parameter, buffer or an
    attribute of one)."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return node.name
    local = getattr(source, "local_name", None)
    if type(source).__name__ == "LocalSource":
        return local
    index = _argument_index(node)         # a module compiled whole: forward(*args)
    return f"args_{index}" if index is not None else None


def _real_example(value: Any, example: Any) -> torch.Tensor:
    """A real tensor of the hint size: dynamo's example itself when it is one."""
    if isinstance(example, torch.Tensor) and not isinstance(example, torch._subclasses.FakeTensor):
        return example
    shape = [size_hint(s) for s in value.shape]
    if value.dtype.is_floating_point or value.dtype.is_complex:
        return torch.randn(shape, dtype=value.dtype, device=value.device)
    return torch.zeros(shape, dtype=value.dtype, device=value.device)


def tensors_only(graph_module: torch.nn.Module, layout: list, count: int) -> torch.fx.GraphModule:
    """The dynamo graph called with its `count` tensor inputs only (positional, as torch.export
    wants them); each size input is read from the tensor dimension that carries it. layout, per
    graph input: ("tensor", k), ("size", k, dim) or ("const", value)."""
    root = torch.nn.Module()
    root.graph_module = graph_module
    graph = torch.fx.Graph()
    tensors = [graph.placeholder(f"input_{k}") for k in range(count)]
    args = []
    for entry in layout:
        if entry[0] == "tensor":
            args.append(tensors[entry[1]])
        elif entry[0] == "scalar":
            args.append(graph.call_function(torch.tensor, (entry[1],), {"dtype": entry[2]}))
        elif entry[0] == "size":
            args.append(graph.call_method("size", (tensors[entry[1]], entry[2])))
        else:
            args.append(entry[1])
    graph.output(graph.call_module("graph_module", tuple(args)))
    return torch.fx.GraphModule(root, graph)


@dataclass
class DynamicGraph:
    """What fact.optimize gets for a symbolic dynamo graph, and how dynamo calls the result."""
    module: torch.fx.GraphModule   # the graph over its tensor inputs only
    examples: tuple                # real tensors at the hint sizes, one per tensor input
    dynamic_shapes: tuple          # {dim: Range} (or None) per tensor input
    tensor_positions: list         # the graph input position of each tensor input
    scalars: dict                  # graph input position -> the Python float planned as a constant
    original: Callable             # the dynamo graph, for a call whose floats differ

    def call(self, composed: Callable) -> Callable:
        """The callable dynamo runs: takes every graph input (sizes included), passes the
        tensors on; the sizes are dropped (dynamo's guards keep them equal to the tensors').
        Python floats dynamo passes as tensors were planned as constants: another value runs
        the graph as dynamo captured it."""
        positions, scalars, original = self.tensor_positions, self.scalars, self.original

        def run(*args: Any) -> Any:
            if any(args[i].item() != value for i, value in scalars.items()):
                return original(*args)
            return composed(*[args[i] for i in positions])
        run.fact_composed = composed
        return run


def _declared(spec: Any, dims: Any, inputs: list, values: list) -> dict:
    """{(tensor input k, dim): Range} from the "dynamic"/"dims" options (fact.dynamic_ranges.
    bind_ranges over the user tensor inputs at their hint sizes); inputs are (k, name) of the
    user tensor inputs, values the example value per tensor input."""
    if not inputs:
        raise ValueError("backend 'fact': the graph takes no tensor inputs to bind 'dynamic' to")
    if isinstance(dims, dict):
        dims = [f"{key}:{','.join(name or '_' for name in names)}" for key, names in dims.items()]
    bound = bind_ranges(spec, dims, [(name, [size_hint(size) for size in values[k].shape]) for k, name in inputs],
                        dims_label="backend 'fact': dims", dynamic_label="backend 'fact': 'dynamic'",
                        dims_flag="'dims'")
    return {(inputs[position][0], dim): declared for (position, dim), declared in bound.items()}


def _dynamo_range(symbol: Any, size: torch.SymInt, where: str) -> Range:
    bounds = size.node.shape_env.var_to_range.get(symbol)
    upper = getattr(bounds, "upper", None)
    try:
        upper = int(upper)
    except Exception:  # noqa: BLE001 - sympy's infinities
        upper = None
    if upper is None or upper >= _UNBOUNDED:
        raise ValueError(f"backend 'fact': {where} is dynamic with no declared range; pass "
                         f"options={{'dynamic': 'name=MIN..MAX'}} (and 'dims' to name the "
                         f"dimension), or mark_dynamic(x, dim, min=..., max=...)")
    return Range(str(symbol), max(int(bounds.lower), 1), upper)


def _argument_index(node: torch.fx.Node) -> int | None:
    """The position of a placeholder's tensor among a `forward(*args)`'s arguments (dynamo's
    source `args[i]`), None for anything else."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    base = getattr(source, "base", None)
    if type(source).__name__ == "GetItemSource" and getattr(base, "local_name", None) == "args" \
            and isinstance(getattr(source, "index", None), int):
        return source.index
    return None


def _graph_inputs(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple:
    """(placeholders, their values, {position: Python float passed as a tensor}, the tensor
    inputs' positions, the tensor values)."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    values = [_meta(n) for n in placeholders]
    values = [v if v is not None else e for v, e in zip(values, example_inputs)]
    scalars = {i: example_inputs[i] for i, n in enumerate(placeholders)
               if getattr(n.meta.get("grapharg"), "pass_arg_as_tensor", False)}
    tensor_positions = [i for i, v in enumerate(values)
                        if isinstance(v, torch.Tensor) and i not in scalars]
    return placeholders, values, scalars, tensor_positions, [values[i] for i in tensor_positions]


def _symbol_ranges(placeholders: list, tensor_positions: list, tensors: list, spec: Any, dims: Any,
                   by_argument: dict | None) -> tuple[dict, dict]:
    """({symbol: Range}, {symbol: (tensor input k, dim, size)}: the first dimension carrying it).
    by_argument: {forward argument position: {dim: Range}} (fact.optimize's declaration of a
    `forward(*args)`), else spec/dims bound to the user tensor inputs by name."""
    carriers: dict = {}                       # symbol -> (k, dim, size)
    for k, value in enumerate(tensors):
        for dim, size in enumerate(value.shape):
            symbol = _symbol(size)
            if symbol is not None:
                carriers.setdefault(symbol, (k, dim, size))
    inputs = [(k, _input_name(placeholders[i])) for k, i in enumerate(tensor_positions)
              if not isinstance(tensors[k], torch.nn.Parameter) and _input_name(placeholders[i])]
    if by_argument is not None:
        declared = {(k, dim): declared_range for k, i in enumerate(tensor_positions)
                    for dim, declared_range in (by_argument.get(_argument_index(placeholders[i])) or {}).items()}
    else:
        declared = _declared(spec, dims, inputs, tensors) if spec else {}
    ranges: dict = {}                         # symbol -> Range
    for (k, dim), declared_range in declared.items():
        symbol = _symbol(tensors[k].shape[dim])
        if symbol is None:
            continue                          # dynamo made this dimension static
        seen = ranges.setdefault(symbol, declared_range)
        if seen != declared_range:
            raise ValueError(f"backend 'fact': one dynamo size is declared as {seen.spec()} and "
                             f"as {declared_range.spec()}")
    for symbol, (k, dim, size) in carriers.items():
        if symbol not in ranges:
            name = dict(inputs).get(k, placeholders[tensor_positions[k]].name)
            ranges[symbol] = _dynamo_range(symbol, size, f"dimension {dim} of input '{name}'")
    return ranges, carriers


def symbol_ranges(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                  spec: Any = None, dims: Any = None, by_argument: dict | None = None) -> dict:
    """{sympy symbol: Range} for every symbolic dimension of the graph's tensor inputs: the
    declared range bound to it (spec/dims by input name, or by_argument by forward argument
    position), else dynamo's own bounded range; ValueError when one has none."""
    placeholders, _, _, tensor_positions, tensors = _graph_inputs(graph_module, example_inputs)
    return _symbol_ranges(placeholders, tensor_positions, tensors, spec, dims, by_argument)[0]


def within_dynamos_bounds(ranges: dict, example_inputs: Sequence[Any]) -> dict:
    """Each {symbol: Range} raised to dynamo's own lower bound of the symbol (from the shape
    environment of the graph's symbolic example inputs) where that is higher: a graph with a
    symbolic size runs only inside dynamo's range, whose lower bound is 2 where dynamo
    specializes sizes 0 and 1 (a call of size 1 is traced again). Planning over the narrower
    range lets size expressions that differ at 1 be written (Mod(s1, s0*s1) is s1 for s0 >= 2)."""
    shape_env = next((size.node.shape_env for x in example_inputs if isinstance(x, torch.Tensor)
                      for size in x.shape if isinstance(size, torch.SymInt)), None)
    if shape_env is None:
        return dict(ranges)
    narrowed = {}
    for symbol, declared in ranges.items():
        narrowed[symbol] = declared
        bounds = shape_env.var_to_range.get(symbol)
        try:
            lower = int(bounds.lower)
        except Exception:  # noqa: BLE001 - no finite bound
            continue
        if declared.min < lower <= declared.max:
            typical = tuple(t for t in declared.typical if t >= lower)
            narrowed[symbol] = Range(declared.name, lower, declared.max, declared.multiple, typical)
    return narrowed


def dynamic_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                  spec: Any = None, dims: Any = None) -> DynamicGraph | None:
    """The declared ranges of a graph with symbolic input sizes, None for a static graph.
    ValueError when a symbolic dimension has no bounded range or a size input is carried by no
    tensor dimension."""
    placeholders, values, scalars, tensor_positions, tensors = _graph_inputs(graph_module, example_inputs)
    symbolic = any(isinstance(v, torch.SymInt) for v in values) or any(
        isinstance(v, torch.Tensor) and any(_symbol(s) is not None for s in v.shape) for v in values)
    if not symbolic:
        return None
    ranges, carriers = _symbol_ranges(placeholders, tensor_positions, tensors, spec, dims, None)
    layout = []
    for i, value in enumerate(values):
        if i in scalars:                      # a Python float dynamo passes as a tensor
            layout.append(("scalar", scalars[i].item(), scalars[i].dtype))
        elif isinstance(value, torch.Tensor):
            layout.append(("tensor", tensor_positions.index(i)))
        elif isinstance(value, torch.SymInt) and _symbol(value) is not None:
            symbol = _symbol(value)
            if symbol not in carriers:
                raise ValueError(f"backend 'fact': the graph takes the size {symbol}, which no "
                                 f"tensor input dimension carries")
            layout.append(("size", carriers[symbol][0], carriers[symbol][1]))
        else:
            layout.append(("const", size_hint(value) if isinstance(value, torch.SymInt) else value))
    examples = tuple(_real_example(tensors[k], example_inputs[i])
                     for k, i in enumerate(tensor_positions))
    shapes = tuple({dim: ranges[_symbol(s)] for dim, s in enumerate(t.shape) if _symbol(s) is not None}
                   or None for t in tensors)
    return DynamicGraph(tensors_only(graph_module, layout, len(tensors)), examples, shapes,
                        tensor_positions, {i: scalars[i].item() for i in scalars}, graph_module)
