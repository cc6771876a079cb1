"""Verify the replacement, not its description (docs/architecture.md; docs/plan.md step 3).

A replacement's captured nodes are lifted out of the exported graph into their own
GraphModule (`lift`): its inputs are the values those nodes read from outside, its outputs the
replacement's outputs. `check` runs that subgraph in float64 (PyTorch, on the inputs' device)
as the reference, and the replacement's calls (`fact::launch_out`, results poisoned with NaN
first) in the model's dtype on the same inputs: fresh random normal values for the floating
activations the calls read (seeded per replacement), the example values for integer and boolean
ones and for activations no call reads (what the replacement assumes about those, e.g. that a
mask the model computes from constants is causal, is tested on what the model computes), the
real values of parameters, buffers and constants. Every output must be fully written, finite
and within its call's tolerance (||out - ref|| / ||ref||). A kernel checked against a
reference built from the same description could not catch a wrong description; this can.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch
import torch.fx
from torch.utils._pytree import tree_leaves, tree_map

from fact import ops, transforms


@dataclass
class Lifted:
    module: torch.fx.GraphModule
    inputs: list          # the nodes of the exported graph the subgraph reads, in placeholder order
    outputs: list         # the nodes it hands back, in order
    nodes: list           # the lifted nodes, in graph order


def expand(nodes: Iterable[torch.fx.Node]) -> list[torch.fx.Node]:
    """`nodes` with the getitem nodes reading their tuple results, in graph order."""
    chosen = set(nodes)
    for node in list(chosen):
        for user in node.users:
            if user.op == "call_function" and user.target is operator.getitem:
                chosen.add(user)
    if not chosen:
        return []
    graph = next(iter(chosen)).graph
    return [node for node in graph.nodes if node in chosen]


def _attribute(root: torch.nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def lift(graph_module: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node],
         outputs: Sequence[torch.fx.Node]) -> Lifted:
    """The subgraph of `nodes` (graph order, getitems included) as a GraphModule returning
    `outputs` (a tuple). Values read from outside become placeholders, parameters and buffers
    included; submodule attributes (higher-order ops' bodies) stay attributes."""
    ordered = expand(nodes)
    inside = set(ordered)
    missing = [node.name for node in outputs if node not in inside]
    if missing:
        raise ValueError(f"outputs {', '.join(missing)} are not among the replaced nodes")
    externals: list[torch.fx.Node] = []
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in ordered:
        for read in node.all_input_nodes:
            if read in inside or read in env or read in externals:
                continue
            if read.op == "get_attr" and isinstance(_attribute(graph_module, read.target), torch.nn.Module):
                continue  # copied as an attribute below
            externals.append(read)
    for read in externals:
        env[read] = graph.placeholder(read.name)
        env[read].meta = dict(read.meta)
    for node in ordered:
        for read in node.all_input_nodes:
            if read not in env:  # a submodule attribute
                env[read] = graph.get_attr(read.target)
        env[node] = graph.node_copy(node, lambda read: env[read])
    graph.output(tuple(env[node] for node in outputs))
    return Lifted(torch.fx.GraphModule(graph_module, graph), externals, list(outputs), ordered)


class _Float64Interpreter(torch.fx.Interpreter):
    """Runs a graph with every floating tensor and every floating dtype argument widened to
    float64 (an op that casts to bfloat16 in the model casts to float64 here)."""

    def run_node(self, n: torch.fx.Node) -> Any:
        return _widen(super().run_node(n))

    def call_function(self, target, args, kwargs):
        return super().call_function(target, tree_map(_widen, args), tree_map(_widen, kwargs))

    def call_method(self, target, args, kwargs):
        return super().call_method(target, tree_map(_widen, args), tree_map(_widen, kwargs))


def _widen(value: Any) -> Any:
    if isinstance(value, torch.dtype) and value.is_floating_point:
        return torch.float64
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
        return value.to(torch.float64)
    return value


def float64_run(module: torch.fx.GraphModule, inputs: Sequence[Any]) -> tuple:
    """The module's outputs computed in float64 (see _Float64Interpreter)."""
    with torch.no_grad():
        return tuple(_Float64Interpreter(module).run(*[_widen(v) for v in inputs]))


def random_like(meta: torch.Tensor, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """Fresh normal values with `meta`'s shape, strides and dtype (any strides: the values come
    from a dense base long enough for every addressed element)."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(meta.shape, meta.stride()) if size > 0)
    base = torch.randn(max(extent, 1), generator=generator, dtype=torch.float32)
    return base.to(device=device, dtype=meta.dtype).as_strided(tuple(meta.shape), tuple(meta.stride()))


class _Keep(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule, keep: set):
        super().__init__(module)
        self.keep, self.kept = keep, {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n in self.keep:
            self.kept[n] = result
        return result


def example_values(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                   nodes: set) -> dict:
    """The values `nodes` take when the graph runs on the example inputs (one run)."""
    if not nodes:
        return {}
    interpreter = _Keep(graph_module, set(nodes))
    with torch.no_grad():
        interpreter.run(*tree_leaves(tuple(example_inputs)))
    return interpreter.kept


def needs_example_value(node: torch.fx.Node) -> bool:
    """Whether a lifted input keeps its example value: everything but parameters, buffers and
    constants (real values) and floating activations (fresh random values)."""
    if node.op == "get_attr":
        return False
    meta = node.meta.get("val")
    return not (isinstance(meta, torch.Tensor) and meta.is_floating_point())


def keeps_example_value(node: torch.fx.Node, operands: set) -> bool:
    """needs_example_value, and also a floating activation that none of the replacement's calls
    reads (`operands`: the nodes the calls take): the replacement assumes what the graph
    computes for it (e.g. an additive causal mask the model builds from constants), so the check
    gives it the value the model gives it, and tests that assumption on it."""
    if node.op == "get_attr":
        return False
    return needs_example_value(node) or node not in operands


def operand_nodes(values: dict, calls: Sequence["CallToCheck"]) -> set:
    """The nodes of the exported graph that the calls read (`values`: value id -> node)."""
    return {values[vid] for call in calls for vid in call.operands if vid in values}


_CONVERSIONS = ("aten.to.dtype", "aten._to_copy.default", "aten.to.dtype_layout")


def _converted_from(node: torch.fx.Node, read: set) -> torch.fx.Node | None:
    """The node a lifted input is a plain dtype conversion of, when the calls read that node
    (else None). RMSNorm folded into its projections (patterns/rmsnorm): the replaced nodes read
    x.float(), the calls read x itself; the reference must see the conversion of the x the
    calls get, not an unrelated random tensor."""
    if node.op != "call_function" or str(node.target) not in _CONVERSIONS:
        return None
    source = node.args[0] if node.args else None
    meta = node.meta.get("val")
    if not isinstance(source, torch.fx.Node) or source not in read or not isinstance(meta, torch.Tensor):
        return None
    return source


@dataclass
class CallToCheck:
    id: int                      # registered fact::launch call
    label: str
    operands: list[str]          # value ids
    results: list[tuple]         # (value id, shape, stride, dtype[, alloc_shape or None])
    sizes: tuple = ()            # the plan symbols' sizes (a call planned over symbols)


def is_out_of_memory(error: BaseException) -> bool:
    """A device (or host) allocation failed: the check does not fit, not a wrong result."""
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(error)


@dataclass
class Verdict:
    failure: str = ""                          # "" when the replacement passes
    errors: dict = field(default_factory=dict)  # output value -> [rel_err, tolerance]
    out_of_memory: bool = False                # the float64 reference did not fit in memory

    @property
    def worst(self) -> tuple:
        """(rel_err, tolerance) of the output closest to its tolerance (None, None if none)."""
        if not self.errors:
            return None, None
        return max(self.errors.values(), key=lambda e: (e[0] / e[1]) if e[1] else math.inf)


def _poisoned(result: tuple, device) -> torch.Tensor:
    """A call's result (a CallToCheck result tuple) allocated as the plan says, filled with NaN."""
    tensor = ops.allocate_result(ops.result_spec(result), device)
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.fill_(float("nan"))
    return tensor


def compare(got: torch.Tensor, reference: torch.Tensor, tolerance: float) -> tuple[float | None, str]:
    """(rel_err, "" or why `got` fails against the float64 `reference`)."""
    if tuple(got.shape) != tuple(reference.shape):
        return None, f"shape {list(got.shape)}, the replaced subgraph gives {list(reference.shape)}"
    want = reference.to(torch.float64)
    if not torch.isfinite(want).all():
        return None, "the replaced subgraph's float64 result is not finite on these inputs"
    if got.is_floating_point() or got.is_complex():
        unwritten = int(torch.isnan(got).sum())
        if unwritten:
            return None, f"{unwritten} of {got.numel()} elements not written (still NaN after the call)"
        if not torch.isfinite(got).all():
            return None, "non-finite values"
    have = got.to(torch.float64)
    reference_norm = torch.linalg.vector_norm(want).item()
    difference = torch.linalg.vector_norm(have - want).item()
    rel_err = difference / reference_norm if reference_norm > 0 else difference
    if not rel_err <= tolerance:
        return rel_err, f"rel_err {rel_err:.3e} above the tolerance {tolerance:.1e}"
    return rel_err, ""


class InputError(ValueError):
    """The replacement's inputs cannot be built (its message says why)."""


def replacement_inputs(lifted: Lifted, graph_module: torch.fx.GraphModule, values: dict,
                       calls: Sequence[CallToCheck], device: torch.device, seed: int,
                       examples: dict) -> dict:
    """node -> the value the check (and the per-replacement speed check, fact.replacement_speed)
    gives each input of the lifted subgraph and each operand node of the calls: parameters,
    buffers and constants their real values, floating activations the calls read fresh random
    values (seeded), the rest their example values. Raises InputError."""
    generator = torch.Generator().manual_seed(seed)
    given: dict[torch.fx.Node, Any] = {}
    read = operand_nodes(values, calls)
    converted = {node: source for node in lifted.inputs
                 if (source := _converted_from(node, read)) is not None}
    for node in list(dict.fromkeys([*lifted.inputs, *values.values()])):
        if node in converted:
            continue  # computed below from the value the calls read
        if node.op == "get_attr":
            value = _attribute(graph_module, node.target)
            given[node] = value.detach() if isinstance(value, torch.Tensor) else value
        elif not keeps_example_value(node, read):
            # A symbolic program's metadata has symbolic sizes: the example value at the sizes
            # being checked gives the concrete layout.
            given[node] = random_like(examples.get(node, node.meta["val"]), device, generator)
        elif node in examples:
            given[node] = examples[node]
        else:
            raise InputError(f"no example value for input {node.name}")
    for node, source in converted.items():
        given[node] = given[source].to(node.meta["val"].dtype)
    return given


def call_environment(values: dict, given: dict, derived: dict | None) -> dict:
    """value id -> tensor for the calls' operands that are not results of earlier calls: the
    given values, and the derived operands computed from them (fact.transforms). Raises
    InputError."""
    env = {vid: given[node] for vid, node in values.items()}
    try:
        for vid, (entry, sources) in (derived or {}).items():
            env[vid] = transforms.evaluate(entry, [given[node] for node in sources])
    except (transforms.TransformError, KeyError) as error:
        raise InputError(f"derived operand: {_first_line(error)}") from error
    return env


def check(lifted: Lifted, graph_module: torch.fx.GraphModule, values: dict, calls: Sequence[CallToCheck],
          outputs: Sequence[str], tolerances: dict, device: torch.device, seed: int,
          examples: dict, derived: dict | None = None) -> Verdict:
    """Runs the replacement's calls against the lifted subgraph in float64 (module docstring).
    `values`: value id -> node of the exported graph for the calls' operands that are not
    results of earlier calls; `tolerances`: output value id -> tolerance; `examples`: node ->
    example value (for inputs that keep theirs); `derived`: derived value id -> (its plan
    entry, its source nodes), computed here from the same source values the reference reads
    (fact.transforms), so a wrong transform fails the check like a wrong kernel."""
    try:
        given = replacement_inputs(lifted, graph_module, values, calls, device, seed, examples)
    except InputError as error:
        return Verdict(str(error))
    try:
        reference = float64_run(lifted.module, [given[node] for node in lifted.inputs])
    except Exception as error:  # noqa: BLE001 - the subgraph itself does not run lifted
        return Verdict(f"the replaced subgraph does not run on its own in float64 ({_first_line(error)})",
                       out_of_memory=is_out_of_memory(error))
    try:
        env = call_environment(values, given, derived)
    except InputError as error:
        return Verdict(str(error))
    try:
        with torch.no_grad():
            for call in calls:
                operands = [env[vid] for vid in call.operands]
                results = [_poisoned(result, device) for result in call.results]
                torch.ops.fact.launch_out.default(operands, results, call.id, list(call.sizes))
                env.update({result[0]: tensor for result, tensor in zip(call.results, results)})
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as error:  # noqa: BLE001 - a call that fails fails the check
        return Verdict(f"the calls failed: {_first_line(error)}")
    verdict = Verdict()
    for vid, want in zip(outputs, reference):
        rel_err, why = compare(env[vid], want, tolerances[vid])
        if rel_err is not None:
            verdict.errors[vid] = [rel_err, tolerances[vid]]
        if why and not verdict.failure:
            verdict.failure = f"output {vid}: {why}"
    return verdict


def _first_line(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]
