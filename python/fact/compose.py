"""`fact.optimize(module, example_inputs, precision=...)`: the module with the subgraphs the
engine planned replaced by `fact::launch` calls (docs/compose.md, docs/plan.md).

Two halves, so a saved plan can be applied again without the engine:

- `plan(...)` (needs the engine library): capture the module as graph JSON and call the
  engine in process (`fact_engine_plan`, include/fact/engine/c_api.h), which discovers,
  realizes (and tunes, when asked) and writes `plan.json` (schema fact.plan/2) into the work
  folder.
- `apply_plan(...)` (no engine): export the module, map the plan's value ids to FX nodes,
  check each planned replacement against the graph, register its calls, verify it against the
  subgraph it replaces (fact.verify), leave to PyTorch the ones slower than the subgraph they
  replace (fact.replacement_speed), insert one `fact::launch` per call, compile the PyTorch
  remainder, and make sure the result is never slower than `torch.compile` of the original.

The plan is the one description of every replacement: nothing here knows a problem kind, an
epilogue, a layout or a limit. `optimize` is `plan` followed by `apply_plan`. The result is a
`ComposedModule`: for inputs with the planned signature (shapes, dtypes, devices, strides) it
runs the composed graph (or, where that is not faster, the compiled original), for anything
else the original module (with a one-line warning, once per signature). Whatever is not
composed is left to PyTorch and listed, with the reason, in `.fact_report`; optimize never
raises for a module that runs.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import operator
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, Union

import torch
import torch.fx

from fact import _engine, engine_tables, ops, transforms
from fact import verify as checks
from fact.graph_capture import capture
from fact import graph_writer
from fact.graph_writer import CaptureError
from fact.kernels import KernelLoadError
from fact.replacement_speed import time_replacement
from fact.report import ComposedCall, ComposedReplacement, FactReport, LeftToPyTorch  # noqa: F401
from fact.timing import CandidatesTimer, Timer, capture_cuda_graph, l2_flushed_medians_ms

REMAINDERS = ("inductor", "eager")
PLAN_SCHEMA = "fact.plan/2"
PLAN_FILE = "plan.json"
USABLE_KERNEL_STATUSES = ("built", "cached")
SLOWER_BY = 1.02   # the composed module falls back when it takes longer than this × the compiled original,
                   # and a replacement is left to PyTorch when its calls take longer than this × its subgraph


def _first_line(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]


# --------------------------------------------------------------------------------------------
# Guards


def _signature(args: Sequence[Any]) -> tuple:
    """What the composed graph assumes about its inputs: shape, dtype, device, strides and
    16-byte alignment of every tensor; the value of everything else."""
    parts = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            parts.append(("tensor", tuple(arg.shape), arg.dtype, arg.device, arg.stride(),
                          _aligned(arg)))
        else:
            parts.append(("value", repr(arg)))
    return tuple(parts)


def _aligned(t: torch.Tensor) -> bool:
    if t.device.type != "cuda":
        return True
    try:
        return t.data_ptr() % 16 == 0
    except RuntimeError:  # fake tensors have no data
        return True


def _describe(signature: tuple) -> str:
    words = []
    for part in signature:
        if part[0] == "tensor":
            words.append(f"{part[2]}{list(part[1])}@{part[3]} strides {part[4]}"
                         + ("" if part[5] else " unaligned"))
        else:
            words.append(part[1])
    return "(" + ", ".join(words) + ")"


class _CudaGraphRunner:
    """`fn` captured into a torch.cuda.CUDAGraph for one input signature: each call copies its
    tensors into the static input buffers, replays, and returns copies of the static outputs
    (so a later call never overwrites a result the caller kept)."""

    def __init__(self, fn: Callable, example_args: Sequence[Any], warmup_calls: int = 3):
        self.static_args = [_static_like(a) for a in example_args]
        self.graph, self.static_output = capture_cuda_graph(lambda: fn(*self.static_args),
                                                            warmup_calls)

    def __call__(self, args: Sequence[Any]):
        for static, arg in zip(self.static_args, args):
            if isinstance(static, torch.Tensor):
                static.copy_(arg)
        self.graph.replay()
        return torch.utils._pytree.tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) else t, self.static_output)


def _static_like(arg: Any) -> Any:
    if not isinstance(arg, torch.Tensor):
        return arg
    static = torch.empty_strided(arg.shape, arg.stride(), dtype=arg.dtype, device=arg.device)
    static.copy_(arg)
    return static


@dataclass
class ReplacedSubgraph:
    """A composed replacement as a benchmark times it alone: the subgraph it replaced, lifted
    out of the exported graph (fact.verify.lift), and its fact::launch calls."""
    label: str
    rule: str
    summary: str                  # the calls' summaries, "; "-joined
    kernels: list                 # the calls' kernel names ("" where none)
    module: torch.fx.GraphModule  # the lifted subgraph (returns a tuple of the outputs)
    inputs: list                  # its inputs: (node name, op, target) in the exported graph
    values: dict                  # call operand value id -> (node name, op, target)
    calls: list                   # (call number, operand value ids, result value ids)
    outputs: list                 # output value ids, in the module's output order
    derived: dict = field(default_factory=dict)  # derived operand value id -> its tensor


class ComposedModule(torch.nn.Module):
    """The optimized module. `graph_module` is the rewritten exported graph (None when nothing
    was composed), `original` the module it came from, `fact_report` what was done and why.
    For the planned signature it runs, in this order of preference: the fallback the report's
    `runs` names when one was chosen (torch.compile of the original: nothing composed, or the
    composed graph was slower), the CUDA graph, the Inductor-compiled remainder, the graph
    eagerly. Other signatures run the original module."""

    def __init__(self, original: torch.nn.Module, graph_module: torch.fx.GraphModule | None,
                 signature: tuple | None, report: FactReport):
        super().__init__()
        self.original = original
        self.graph_module = graph_module
        self.planned_signature = signature
        self.fact_report = report
        self._warned: set = set()
        # Not submodules (their parameters are the original's): kept out of state_dict.
        self.__dict__["_compiled"] = None
        self.__dict__["_cuda_graph"] = None
        self.__dict__["_fallback"] = None
        self.__dict__["replacements"] = []  # ReplacedSubgraph per composed replacement
        # Derived operands (packed / folded weights) as buffers of graph_module: computed again
        # before a call when a parameter they come from changed.
        self.__dict__["_derived"] = []

    def _run_composed(self, args: tuple):
        if self._cuda_graph is not None:
            return self._cuda_graph(args)
        if self._compiled is not None:
            try:
                return self._compiled(*args)
            except Exception as error:  # noqa: BLE001 - Inductor trouble: eager from now on
                self.__dict__["_compiled"] = None
                self.fact_report.remainder = f"eager (Inductor failed at a call: {_first_line(error)})"
                warnings.warn(f"fact: the Inductor-compiled remainder failed "
                              f"({_first_line(error)}); running it eagerly from now on",
                              stacklevel=3)
        # forward, not __call__: the exported module's pre-hooks re-check what the signature
        # guard has already checked (pytree spec, input constraints) on every call.
        return self.graph_module.forward(*args)

    def _run_planned(self, args: tuple):
        if self._fallback is not None:
            return self._fallback(*args)
        if self.graph_module is None:
            return self.original(*args)
        for buffer in self._derived:
            buffer.refresh()
        return self._run_composed(args)

    def forward(self, *args, **kwargs):
        if self.planned_signature is None:
            return self.original(*args, **kwargs)
        signature = _signature(args)
        if kwargs or signature != self.planned_signature:
            if self.graph_module is not None and signature not in self._warned:
                self._warned.add(signature)
                warnings.warn(f"fact: inputs {_describe(signature)} differ from the planned "
                              f"{_describe(self.planned_signature)}; running the original module "
                              f"for them", stacklevel=2)
            return self.original(*args, **kwargs)
        return self._run_planned(args)


# --------------------------------------------------------------------------------------------
# Inputs


def _normalize_inputs(example_inputs: Sequence[Any] | Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    return tuple(example_inputs)


def _device_of(example_inputs: tuple) -> torch.device:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return tensors[0].device if tensors else torch.device("cpu")


def _input_specs(example_inputs: tuple) -> list[dict]:
    return [{"shape": list(x.shape), "dtype": str(x.dtype)} if isinstance(x, torch.Tensor)
            else {"value": repr(x)} for x in example_inputs]


def _normalize_patterns(patterns: Iterable[str] | str | None) -> list[str] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        return [patterns]
    return sorted(set(patterns))


def _selected(replacement: dict, patterns: list[str] | None) -> bool:
    return (patterns is None or replacement.get("rule") in patterns
            or replacement.get("pattern") in patterns)


def _export(module: torch.nn.Module, example_inputs: tuple) -> torch.export.ExportedProgram:
    shapes_logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    shapes_level = shapes_logger.level
    try:
        shapes_logger.setLevel(logging.ERROR)
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(module, example_inputs, strict=False)
    finally:
        shapes_logger.setLevel(shapes_level)


# --------------------------------------------------------------------------------------------
# The plan


def load_plan(plan_dir: str | Path) -> tuple[dict, Path]:
    """(plan.json's document, the folder it is in); `plan_dir` may name the file itself.
    Raises ValueError for a document that is not a fact.plan/2 plan."""
    path = Path(plan_dir)
    file = path if path.is_file() else path / PLAN_FILE
    doc = json.loads(file.read_text())
    if doc.get("schema") != PLAN_SCHEMA:
        raise ValueError(f"{file} is a '{doc.get('schema')}' document, not a {PLAN_SCHEMA} plan")
    return doc, file.parent


def replacement_label(replacement: dict) -> str:
    """"<label> <rule> at <first node>..<last node>": how reports name a replacement."""
    nodes = replacement.get("nodes", [])
    span = nodes[0] if len(nodes) == 1 else f"{nodes[0]}..{nodes[-1]}" if nodes else "?"
    label = str(replacement.get("label", replacement.get("id", "?")))
    return f"{label} {replacement.get('rule', '?')} at {span}"


class _Decline(Exception):
    """A replacement that stays PyTorch; the message is the reason."""


@dataclass
class _PlannedCall:
    doc: dict
    label: str
    operands: list[str]
    results: list[tuple]           # (value id, shape, stride, dtype)
    tolerance: float | None
    library: str | None
    entry: str | None
    kernel: dict
    id: int = -1


@dataclass
class _Planned:
    doc: dict
    what: str
    nodes: list                    # the replaced nodes, getitems included, graph order
    values: dict                   # value id -> node, for operands that are not call results
    outputs: dict                  # output value id -> node it replaces
    calls: list[_PlannedCall] = field(default_factory=list)
    lifted: Any = None
    derived: dict = field(default_factory=dict)   # derived value id -> (plan entry, source nodes)
    tensors: dict = field(default_factory=dict)   # derived value id -> its tensor (once applied)
    buffers: dict = field(default_factory=dict)   # derived value id -> its buffer in the graph module
    seed: int = 0                 # of the random inputs of its checks (float64 and speed: the same inputs)


def _meta(node: torch.fx.Node, graph_module: torch.fx.GraphModule) -> Any:
    """The node's tensor (FakeTensor metadata, or the attribute itself for get_attr)."""
    meta = node.meta.get("val")
    if meta is None and node.op == "get_attr":
        meta = checks._attribute(graph_module, node.target)
    return meta


def _layout(t: Any) -> str:
    return f"{t.dtype} {list(t.shape)} stride {list(t.stride())}"


def _resolve(replacement: dict, doc: dict, graph_module: torch.fx.GraphModule,
             by_name: dict, by_target: dict, claimed: dict, on_gpu: bool,
             library_root: Path) -> _Planned:
    """The replacement mapped onto the exported graph and checked against it; _Decline with
    the difference otherwise. Registers nothing."""
    what = replacement_label(replacement)
    missing = [name for name in replacement.get("nodes", []) if name not in by_name]
    if missing or not replacement.get("nodes"):
        raise _Decline(f"nodes not in the exported graph: {', '.join(missing) or '(none listed)'}")
    nodes = checks.expand(by_name[name] for name in replacement["nodes"])
    taken = [node for node in nodes if node in claimed]
    if taken:
        raise _Decline(f"overlaps {claimed[taken[0]]} at {', '.join(n.name for n in taken)}")
    inside = set(nodes)

    values: dict[str, torch.fx.Node] = {}
    for entry in replacement.get("inputs", []):
        vid, kind, target = entry.get("value"), entry.get("kind"), entry.get("target")
        node = by_target.get(target) if kind in ("parameter", "buffer", "constant") else None
        node = node or by_name.get(vid)
        if node is None:
            raise _Decline(f"input {vid} ({kind}{' ' + target if target else ''}) is not in the "
                           f"exported graph")
        if node in inside:
            raise _Decline(f"input {vid} is computed by the replaced nodes themselves")
        values[vid] = node

    outputs: dict[str, torch.fx.Node] = {}
    for vid in replacement.get("outputs", []):
        node = by_name.get(vid)
        if node is None or node not in inside:
            raise _Decline(f"output {vid} is not one of the replaced nodes")
        outputs[vid] = node
    if not outputs:
        raise _Decline("the replacement lists no outputs")

    produced: dict[str, tuple] = {}
    planned = _Planned(replacement, what, nodes, values, outputs)
    for entry in replacement.get("derived", []) or []:
        vid = str(entry.get("value"))
        try:
            transforms.check(entry)
        except transforms.TransformError as error:
            raise _Decline(str(error)) from None
        sources = []
        for source in entry.get("from", []):
            node = values.get(source)
            if node is None or node.op != "get_attr":
                raise _Decline(f"derived value {vid}: source {source} is not a parameter, buffer "
                               f"or constant among the replacement's inputs")
            sources.append(node)
        if vid in values or vid in planned.derived:
            raise _Decline(f"derived value {vid} is named twice")
        planned.derived[vid] = (entry, sources)
    kernels = doc.get("kernels", {}) or {}
    for call in replacement.get("calls", []):
        label = str(call.get("label", ""))
        try:
            ops.check_call(call)
        except (ValueError, KeyError, TypeError) as error:
            raise _Decline(f"call {label}: {error}") from None
        operands = [str(o.get("value")) for o in call.get("operands", [])]
        for index, (vid, operand) in enumerate(zip(operands, call.get("operands", []))):
            if vid in produced:
                dtype = produced[vid][3]
            elif vid in planned.derived:
                dtype = ops.parse_dtype(planned.derived[vid][0].get("dtype", ""))
            elif vid in values:
                dtype = getattr(_meta(values[vid], graph_module), "dtype", None)
            else:
                raise _Decline(f"call {label}: operand {index} ({vid}) is neither an input of the "
                               f"replacement nor a result of an earlier call")
            if str(dtype) != str(operand.get("dtype")):
                raise _Decline(f"call {label}: operand {index} ({vid}) is {dtype} in the graph, "
                               f"{operand.get('dtype')} in the plan")
        results = []
        for index, result in enumerate(call.get("results", [])):
            vid = str(result.get("value"))
            try:
                dtype = ops.parse_dtype(result.get("dtype", ""))
            except ValueError as error:
                raise _Decline(f"call {label}: result {index} ({vid}): {error}") from None
            spec = (vid, [int(v) for v in result.get("shape", [])],
                    [int(v) for v in result.get("stride", [])], dtype)
            node = by_name.get(vid)
            if node is not None:
                meta = _meta(node, graph_module)
                if not isinstance(meta, torch.Tensor):
                    raise _Decline(f"call {label}: result {vid} is not a tensor in the graph")
                if (meta.dtype, list(meta.shape), list(meta.stride())) != (dtype, spec[1], spec[2]):
                    raise _Decline(f"call {label}: result {vid} is {_layout(meta)} in the graph, "
                                   f"{dtype} {spec[1]} stride {spec[2]} in the plan")
            elif vid in outputs:
                raise _Decline(f"call {label}: output {vid} is not a graph value")
            results.append(spec)
            produced[vid] = spec
        tolerance = call.get("tolerance")
        key = call.get("kernel")
        kernel = kernels.get(key, {}) if key else {}
        library = entry = None
        if not on_gpu and kernel.get("device") == "host":
            # A kernel built for the host (an agent's kernel for the CPU path, docs/agent.md)
            # runs instead of the host reference; it is verified below like any other.
            if kernel.get("status") not in USABLE_KERNEL_STATUSES:
                raise _Decline(f"call {label}: host kernel {kernel.get('name', key)} is "
                               f"{kernel.get('status', 'not in the plan')}")
            path = Path(kernel.get("library", ""))
            path = path if path.is_absolute() else library_root / path
            if not path.is_file():
                raise _Decline(f"call {label}: kernel library {path} does not exist")
            library, entry = str(path), kernel.get("entry") or None
        if on_gpu:
            if not key:
                raise _Decline(f"call {label}: no kernel was realized for it")
            if kernel.get("status") not in USABLE_KERNEL_STATUSES:
                why = f": {kernel['reason']}" if kernel.get("reason") else ""
                raise _Decline(f"call {label}: kernel {kernel.get('name', key)} is "
                               f"{kernel.get('status', 'not in the plan')}{why}")
            path = Path(kernel.get("library", ""))
            path = path if path.is_absolute() else library_root / path
            if not kernel.get("library") or not path.is_file():
                raise _Decline(f"call {label}: kernel library {path} does not exist")
            library, entry = str(path), kernel.get("entry") or None
        planned.calls.append(_PlannedCall(call, label, operands, results,
                                          float(tolerance) if tolerance is not None else None,
                                          library, entry, kernel))
    if not planned.calls:
        raise _Decline("the replacement has no calls")
    unproduced = [vid for vid in outputs if vid not in produced]
    if unproduced:
        raise _Decline(f"no call produces output {', '.join(unproduced)}")
    return planned


def _tolerances(planned: _Planned) -> dict:
    """Output value id -> the tolerance of the call that produces it (the last one does)."""
    tolerances = {}
    for call in planned.calls:
        for vid, *_ in call.results:
            if vid in planned.outputs:
                tolerances[vid] = call.tolerance
    return tolerances


# --------------------------------------------------------------------------------------------
# Rewriting


def _attribute_value(graph_module: torch.fx.GraphModule, target: str) -> Any:
    value = checks._attribute(graph_module, target)
    return value.detach() if isinstance(value, torch.Tensor) else value


def _source_value(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
    return _attribute_value(graph_module, node.target)


@dataclass
class _DerivedBuffer:
    """A derived operand held by the composed graph module as a buffer, with what it is
    computed from, so it can be computed again when a source changes."""
    owner: torch.fx.GraphModule
    name: str
    doc: dict
    targets: list                 # the sources' attribute names in the graph module
    seen: tuple                   # their (data pointer, version) when it was computed

    def refresh(self) -> bool:
        """Computes the operand again (in place) when a source tensor changed since; True then."""
        sources = [_attribute_value(self.owner, target) for target in self.targets]
        now = transforms.versions(sources)
        if now == self.seen:
            return False
        with torch.no_grad():
            getattr(self.owner, self.name).copy_(transforms.evaluate(self.doc, sources))
        self.seen = transforms.versions(sources)
        return True


def _register_derived(graph_module: torch.fx.GraphModule, planned: _Planned) -> list[_DerivedBuffer]:
    """Registers the replacement's derived operands as (non-persistent) buffers of the graph
    module; records their names in planned.buffers."""
    made = []
    rid = planned.doc.get("id", "x")
    for index, (vid, (doc, sources)) in enumerate(planned.derived.items()):
        name = f"_fact_derived_{rid}_{index}"
        graph_module.register_buffer(name, planned.tensors[vid], persistent=False)
        planned.buffers[vid] = name
        targets = [node.target for node in sources]
        made.append(_DerivedBuffer(graph_module, name, doc, targets,
                                   transforms.versions([_source_value(graph_module, node)
                                                        for node in sources])))
    return made


def _dense_order(shape: Sequence[int], stride: Sequence[int]) -> list[int] | None:
    """The dims from outermost to innermost when (shape, stride) is a dense, non-overlapping
    layout (a permutation of a contiguous one, size-1 dims anywhere); None otherwise."""
    order = sorted(range(len(shape)), key=lambda d: (-stride[d], -d))
    expected = 1
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != expected:
            return None
        expected *= shape[d]
    return order


def _pin_layout(graph: torch.fx.Graph, node: torch.fx.Node, operand: dict,
                anchor: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node]:
    """The operand `node` made to have the planned dense layout in the graph itself: permute to
    the planned dim order, `contiguous`, permute back (only `contiguous` when the order is the
    identity). Eagerly these are views and a no-op `contiguous` (the exported value already has
    the planned layout); a compiler that reorders or decomposes the producer (Inductor's `cat`
    of one non-empty tensor becomes a stride-preserving `clone`, which gave phi3's rotated q/k
    another layout than the plan's) must produce it here, because fact::launch is tagged
    needs_exact_strides and takes the strides of its inputs as traced. A layout that is not
    dense (a view into a larger tensor, e.g. V sliced out of a fused QKV projection) cannot be
    produced by a copy and is left as it is (fact::launch checks it). Returns (the node to
    pass, the last node inserted or `anchor`)."""
    shape, stride = operand.get("shape"), operand.get("stride")
    meta = node.meta.get("val")
    if shape is None or stride is None or not isinstance(meta, torch.Tensor):
        return node, anchor
    shape, stride = [int(v) for v in shape], [int(v) for v in stride]
    if list(meta.shape) != shape:
        return node, anchor
    order = _dense_order(shape, stride)
    if order is None:
        return node, anchor
    identity = order == list(range(len(shape)))
    inverse = [order.index(d) for d in range(len(shape))]
    value = meta
    steps = ([] if identity else [(torch.ops.aten.permute.default, (order,))]) + \
        [(torch.ops.aten.contiguous.default, ())] + \
        ([] if identity else [(torch.ops.aten.permute.default, (inverse,))])
    for target, extra in steps:
        with graph.inserting_after(anchor):
            node = graph.call_function(target, (node, *extra))
        if value is not None:
            try:
                value = target(value, *extra)
            except Exception:  # noqa: BLE001 - metadata only
                value = None
        if value is not None:
            node.meta["val"] = value
        anchor = node
    return node, anchor


def _insert(graph: torch.fx.Graph, planned: _Planned, redirect: dict) -> list[str]:
    """Inserts the replacement's fact::launch calls after its last node, redirects the uses of
    its outputs, erases its nodes left without users; returns the names of replaced nodes that
    stay (still used outside the replacement). `redirect` maps replaced nodes of earlier
    replacements to what now stands for them."""
    def current(node):
        while node in redirect:
            node = redirect[node]
        return node

    anchor = planned.nodes[-1]
    made: dict[str, torch.fx.Node] = {}
    for vid, name in planned.buffers.items():
        with graph.inserting_before(planned.nodes[0]):
            made[vid] = graph.get_attr(name)
        made[vid].meta["val"] = planned.tensors[vid]
    for call in planned.calls:
        operands = []
        for vid, operand in zip(call.operands, call.doc.get("operands", [])):
            node = made[vid] if vid in made else current(planned.values[vid])
            if vid not in made and node.op == "call_function":
                node, anchor = _pin_layout(graph, node, operand, anchor)
            operands.append(node)
        with graph.inserting_after(anchor):
            launch = graph.call_function(torch.ops.fact.launch.default, (operands, call.id))
        anchor = launch
        for index, (vid, *_rest) in enumerate(call.results):
            with graph.inserting_after(anchor):
                item = graph.call_function(operator.getitem, (launch, index))
            if vid in planned.outputs and "val" in planned.outputs[vid].meta:
                item.meta["val"] = planned.outputs[vid].meta["val"]
            anchor = item
            made[vid] = item
    for vid, node in planned.outputs.items():
        node.replace_all_uses_with(made[vid])
        redirect[node] = made[vid]
    kept = []
    for node in reversed(planned.nodes):
        # Run-time metadata assertions (torch.export's _assert_tensor_metadata after a .to())
        # read a replaced value and produce nothing: they go with it, as the capture drops them
        # (fact.graph_writer), instead of keeping the replaced computation alive.
        for user in list(node.users):
            if not user.users and graph_writer.is_assertion(user):
                graph.erase_node(user)
        if node.users:
            kept.append(node.name)
        else:
            graph.erase_node(node)
    return kept


def _stable_topological_sort(graph: torch.fx.Graph) -> None:
    """Reorders the graph so every node comes after the nodes it reads, moving as little as
    possible: nodes keep their order unless a node they read comes later, which is then
    moved just before its first reader."""
    order: list[torch.fx.Node] = []
    done: set = set()
    for start in list(graph.nodes):
        if start in done:
            continue
        stack = [(start, iter(start.all_input_nodes))]
        while stack:
            node, reads = stack[-1]
            pending = next((r for r in reads if r not in done), None)
            if pending is not None:
                stack.append((pending, iter(pending.all_input_nodes)))
                continue
            stack.pop()
            if node not in done:
                done.add(node)
                order.append(node)
    previous = None
    for node in order:
        if previous is None:
            first = next(iter(graph.nodes))
            if first is not node:
                first.prepend(node)
        elif previous.next is not node:
            previous.append(node)
        previous = node


# --------------------------------------------------------------------------------------------
# Running: the remainder, CUDA graphs, never slower than doing nothing


def _compiled_original(module: torch.nn.Module, example_inputs: tuple) -> tuple[Callable | None, str]:
    """(torch.compile of the module, run once on the example inputs, or None; why not)."""
    try:
        compiled = torch.compile(module, dynamic=False)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(*example_inputs)
    except Exception as error:  # noqa: BLE001 - never crash: eager instead
        return None, f"Inductor compilation failed: {_first_line(error)}"
    return compiled, ""


def _compile_remainder(composed: ComposedModule, example_inputs: tuple) -> None:
    """torch.compile (Inductor, default mode) of the composed graph, run once on the example
    inputs; on failure the remainder stays eager with the reason in the report."""
    try:
        compiled = torch.compile(composed.graph_module, dynamic=False)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(*example_inputs)
    except Exception as error:  # noqa: BLE001 - never crash: eager instead
        composed.fact_report.remainder = f"eager (Inductor compilation failed: {_first_line(error)})"
        return
    composed.__dict__["_compiled"] = compiled
    composed.fact_report.remainder = "inductor"


def _capture_cuda_graph(composed: ComposedModule, example_inputs: tuple) -> None:
    fn = composed._compiled if composed._compiled is not None else composed.graph_module
    try:
        runner = _CudaGraphRunner(fn, example_inputs)
    except Exception as error:  # noqa: BLE001 - capture trouble: run without the graph
        composed.fact_report.cuda_graphs = f"off (capture failed: {_first_line(error)})"
        return
    composed.__dict__["_cuda_graph"] = runner
    composed.fact_report.cuda_graphs = "on"


def _never_slower(composed: ComposedModule, module: torch.nn.Module, example_inputs: tuple,
                  timer: CandidatesTimer) -> None:
    """Times the composed forward against torch.compile of the original and the original run
    eagerly, on the example inputs, and makes the faster of those two run the planned signature
    when the composed one is slower than it by more than 2% (DESIGN.md rule 11: never slower than
    doing nothing; a small, launch-bound module often runs faster eagerly than compiled). The
    report's `runs` and `speed` say what was found."""
    report = composed.fact_report
    original, why_not = _compiled_original(module, example_inputs)
    # Never `original or module`: torch.compile's OptimizedModule forwards len() (so truth
    # testing) to the module, which raises TypeError for one without __len__.
    baseline = original if original is not None else module
    name = "torch.compile of the original" if original is not None else \
        f"the original eagerly ({why_not})"
    candidates = {"composed": lambda: composed._run_composed(example_inputs),
                  "original": lambda: baseline(*example_inputs)}
    if original is not None:
        candidates["eager"] = lambda: module(*example_inputs)
    try:
        times = timer(candidates)
        composed_ms, original_ms = times["composed"], times["original"]
        eager_ms = times.get("eager")
    except Exception as error:  # noqa: BLE001 - timing trouble: keep what was composed
        _guard_not_done(report, error, "the composed module runs without it")
        return
    report.speed = {"composed_ms": composed_ms, "original_ms": original_ms, "original": name,
                    "threshold": SLOWER_BY}
    fastest, fastest_ms, fastest_name = baseline, original_ms, name
    if eager_ms is not None:
        report.speed["eager_ms"] = eager_ms
        if original_ms > SLOWER_BY * eager_ms:
            fastest, fastest_ms, fastest_name = module, eager_ms, "the original eagerly"
    if composed_ms > SLOWER_BY * fastest_ms:
        composed.__dict__["_fallback"] = fastest
        report.runs = (f"{fastest_name}: the composed module took {composed_ms:.4g} ms, "
                       f"{fastest_name} {fastest_ms:.4g} ms (more than {SLOWER_BY - 1:.0%} faster)")
    else:
        report.runs = (f"composed ({composed_ms:.4g} ms; {name} {original_ms:.4g} ms"
                       + (f"; eagerly {eager_ms:.4g} ms" if eager_ms is not None else "") + ")")


def _guard_not_done(report: FactReport, error: Exception, what_runs: str) -> None:
    """The never-slower check could not time the candidates: a note in the report and a warning,
    so a broken check is not silent (on 2026-11-26 it raised on every GPU case and a composed
    module 3% slower than torch.compile stayed in place)."""
    note = f"never-slower check not done: {_first_line(error)}"
    report.notes.append(note)
    warnings.warn(f"fact: {note}; {what_runs}", RuntimeWarning, stacklevel=3)


def _faster_of_compiled_and_eager(module: torch.nn.Module, compiled: Callable, example_inputs: tuple,
                                  timer: CandidatesTimer, report: FactReport) -> Callable:
    """Nothing composed: torch.compile of the original, unless the original runs faster eagerly
    by more than 2% (then the original itself; DESIGN.md rule 11). The report says which."""
    try:
        times = timer({"compiled": lambda: compiled(*example_inputs),
                       "eager": lambda: module(*example_inputs)})
        compiled_ms, eager_ms = times["compiled"], times["eager"]
    except Exception as error:  # noqa: BLE001 - timing trouble: torch.compile as by default
        _guard_not_done(report, error, "torch.compile of the original runs")
        return compiled
    report.speed = {"original_ms": compiled_ms, "original": "torch.compile of the original",
                    "eager_ms": eager_ms, "threshold": SLOWER_BY}
    if compiled_ms > SLOWER_BY * eager_ms:
        report.runs = (f"the original eagerly (nothing composed; {eager_ms:.4g} ms, torch.compile "
                       f"of it {compiled_ms:.4g} ms)")
        return module
    return compiled


def _module_timer(speed_guard: Union[bool, Timer], on_gpu: bool) -> CandidatesTimer | None:
    """The whole-module never-slower check's timer: for True on CUDA l2_flushed_medians_ms (the
    candidates interleaved round by round, so clock drift falls on each alike); a callable
    speed_guard (any device) times them one after the other; else None (no check)."""
    if callable(speed_guard):
        return lambda candidates: {name: float(speed_guard(fn)) for name, fn in candidates.items()}
    return l2_flushed_medians_ms if speed_guard and on_gpu else None


def _replacement_timer(replacement_guard: Union[bool, Timer, None], speed_guard: Union[bool, Timer],
                       on_gpu: bool) -> tuple[bool, Timer | None]:
    """(whether each replacement is timed against its subgraph, the timer: None for
    fact.replacement_speed's CUDA-graph timing). None follows bool(speed_guard); True times on
    CUDA only; a callable is the timer, on any device."""
    guard = bool(speed_guard) if replacement_guard is None else replacement_guard
    if callable(guard):
        return True, guard
    return bool(guard) and on_gpu, None


def _faster_than_their_subgraphs(accepted: list, graph_module: torch.fx.GraphModule, examples: dict,
                                 device: torch.device, timer: Timer | None, report: FactReport) -> list:
    """DESIGN.md rule 11 per replacement: times each accepted (planned, entry)'s calls against
    the subgraph it replaces (fact.replacement_speed, on the inputs of its float64 check) and
    returns those not slower by more than SLOWER_BY; the others are left to PyTorch (stage
    "speed"). Both times go into the entry. A replacement that cannot be timed is kept, with a
    note."""
    kept = []
    for planned, entry in accepted:
        rid = planned.doc.get("id")
        try:
            timing = time_replacement(
                planned.lifted, graph_module, planned.values,
                [checks.CallToCheck(c.id, c.label, c.operands, c.results) for c in planned.calls],
                device, seed=planned.seed, examples=examples,
                derived=planned.derived, timer=timer)
        except Exception as error:  # noqa: BLE001 - timing trouble never costs a verified replacement
            report.notes.append(f"{planned.what}: kept without timing it against the subgraph it "
                                f"replaces ({_first_line(error)})")
            kept.append((planned, entry))
            continue
        entry.calls_ms, entry.subgraph_ms, entry.timing = timing.calls_ms, timing.subgraph_ms, timing.method
        if timing.slower_than_subgraph(SLOWER_BY):
            report.leave(planned.what, f"slower than PyTorch's own run of the subgraph: "
                                       f"{timing.calls_ms:.4g} ms vs {timing.subgraph_ms:.4g} ms",
                         rid, "speed")
            continue
        kept.append((planned, entry))
    return kept


# --------------------------------------------------------------------------------------------
# Applying (no engine)


def apply_plan(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, plan_dir: str | Path,
               *, remainder: str = "inductor", cuda_graphs: bool = False,
               patterns: Iterable[str] | str | None = None, verify: bool = True,
               kernel_dir: str | Path | None = None, report_path: str | Path | None = None,
               speed_guard: Union[bool, Timer] = True,
               replacement_guard: Union[bool, Timer, None] = None) -> ComposedModule:
    """Applies a plan (docs/plan.md, written by the engine) to `module`; no engine needed.

    The inputs must have the plan's shapes and dtypes. On CUDA the calls run their kernel
    libraries (relative paths resolve against `kernel_dir`, default the plan's folder); on the
    CPU the host reference (fact_reference_call). `patterns` narrows the plan's selection
    (rule or pattern names). `verify`: check each replacement against the subgraph it replaces
    (fact.verify) and leave failing ones to PyTorch. `remainder`: "inductor" compiles the
    PyTorch rest (and, when nothing is composed, the original module), "eager" runs it as is.
    `speed_guard`: on CUDA, time the composed forward against torch.compile of the original
    and the original run eagerly, and run the faster of those when the composed one is slower
    than it by more than 2% (with nothing composed: the original eagerly where that beats its
    torch.compile by more than 2%); False turns this off
    (benchmarks of the raw composed module); a callable (fn -> milliseconds) is the timer to
    use, on any device. `replacement_guard`: on CUDA, time each verified replacement's calls
    against the subgraph it replaces, run eagerly by PyTorch on the same inputs
    (fact.replacement_speed), and leave it to PyTorch (stage "speed") when its calls are slower
    by more than 2%; None (default) follows bool(speed_guard), False turns it off, a callable
    (fn -> milliseconds, given the calls' run, then the subgraph's) is the timer to use, on
    any device. Writes the report to `report_path` when given. Raises ValueError for an
    unknown remainder or a document that is not a plan; anything else is reported."""
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, not '{remainder}'")
    doc, folder = load_plan(plan_dir)
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    precision = doc.get("precision", "")
    report = FactReport(precision=precision, device=str(device), capture=doc.get("capture", ""),
                        work_dir=str(folder), notes=list(doc.get("notes", [])))
    if cuda_graphs:
        report.cuda_graphs = "off (asked for; not reached: nothing composed)"
    signature = _signature(example_inputs)

    def done(composed: ComposedModule) -> ComposedModule:
        report.op_implementation = ops.describe_implementation(device.type)
        if any(entry.implementation == "host kernels" for entry in report.composed):
            report.op_implementation += "; host kernel libraries (registry kernels for the CPU path) for the " \
                                        "replacements marked 'host kernels'"
        if report_path is not None:
            Path(report_path).write_text(json.dumps(report.to_json(), indent=2) + "\n")
        return composed

    def unoptimized(reason: str | None) -> ComposedModule:
        """The module with nothing composed: torch.compile of it for the planned signature
        (remainder "inductor"), else as it is."""
        if reason:
            report.leave("module", reason, stage="module")
        composed = ComposedModule(module, None, signature, report)
        if remainder == "inductor":
            compiled, why_not = _compiled_original(module, example_inputs)
            if compiled is not None:
                report.remainder = "inductor"
                report.runs = "torch.compile of the original (nothing composed)"
                timer = _module_timer(speed_guard, device.type == "cuda")
                composed.__dict__["_fallback"] = compiled if timer is None else \
                    _faster_of_compiled_and_eager(module, compiled, example_inputs, timer, report)
            else:
                report.remainder = f"eager ({why_not})"
                report.runs = f"the original eagerly (nothing composed; {why_not})"
        else:
            report.remainder = "eager"
            report.runs = "the original eagerly (nothing composed)"
        return done(composed)

    if doc.get("status") != "planned":
        return unoptimized(doc.get("reason") or "not planned")
    if device.type == "cpu" and precision == "tf32":
        return unoptimized("precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are on "
                           "the CPU, where only 'strict' and 'native' compose (with the host "
                           "reference)")
    if device.type not in ("cpu", "cuda"):
        return unoptimized(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                           f"(host reference) only")
    given = _input_specs(example_inputs)
    if given != doc.get("inputs"):
        return unoptimized(f"inputs {given} differ from the plan's {doc.get('inputs')}; plan again "
                           f"for them")
    on_gpu = device.type == "cuda"
    if not on_gpu:
        try:
            _engine.reference_library()
        except _engine.EngineNotFound as error:
            return unoptimized(f"no host reference for the CPU path: {error}")
    try:
        exported = _export(module, example_inputs)
    except Exception as error:  # noqa: BLE001 - any export failure leaves the module as is
        return unoptimized(f"cannot be exported with torch.export ({_first_line(error)})")

    # No in-graph guard function: ComposedModule's signature guard checks shapes, dtypes,
    # devices, strides and alignment before the graph runs.
    graph_module = exported.module(check_guards=False)
    graph = graph_module.graph
    by_name = {node.name: node for node in graph.nodes}
    # The plan names the user inputs as the exported program does; unlifting may rename them
    # (`input` -> `input_1`: FX avoids Python builtins). Map them by position.
    user_inputs = [spec.arg.name for spec in exported.graph_signature.input_specs
                   if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
                   and hasattr(spec.arg, "name")]
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    if len(user_inputs) == len(placeholders):
        for lifted_name, node in zip(user_inputs, placeholders):
            by_name.setdefault(lifted_name, node)
    by_target = {node.target: node for node in graph.nodes if node.op == "get_attr"}
    library_root = Path(kernel_dir) if kernel_dir is not None else folder
    plan_selection = doc.get("patterns")
    selected = _normalize_patterns(patterns)
    replacements = doc.get("replacements", []) or []
    for name in sorted(set(selected or []) | set(plan_selection or [])):
        if not any(r.get("rule") == name or r.get("pattern") == name for r in replacements):
            report.notes.append(f"patterns: '{name}' names no replacement of this module")
    if not verify:
        report.notes.append("verify=False: the replacements were not checked against the "
                            "subgraphs they replace")

    # 1. Map and check every planned, selected replacement against the untouched graph.
    claimed: dict[torch.fx.Node, str] = {}
    candidates: list[_Planned] = []
    for replacement in replacements:
        what = replacement_label(replacement)
        rid = replacement.get("id")
        if replacement.get("status") != "planned":
            report.leave(what, f"{replacement.get('status', '?')}: {replacement.get('reason', '')}".rstrip(": "),
                         rid, "plan")
            continue
        if not _selected(replacement, plan_selection) or not _selected(replacement, selected):
            chosen = selected if not _selected(replacement, selected) else plan_selection
            report.leave(what, f"not selected (patterns={', '.join(chosen)})", rid, "selection")
            continue
        try:
            planned = _resolve(replacement, doc, graph_module, by_name, by_target, claimed,
                               on_gpu, library_root)
            planned.lifted = checks.lift(graph_module, planned.nodes, list(planned.outputs.values()))
        except _Decline as decline:
            report.leave(what, str(decline), rid, "check")
            continue
        except ValueError as error:
            report.leave(what, str(error), rid, "check")
            continue
        for node in planned.nodes:
            claimed[node] = what
        candidates.append(planned)

    # 2. Register the calls, verify each replacement against the subgraph it replaces, and
    #    leave those slower than it to PyTorch.
    time_each, replacement_timer = _replacement_timer(replacement_guard, speed_guard, on_gpu)
    examples = {}
    if (verify or time_each) and candidates:
        needed = set()
        for p in candidates:
            read = checks.operand_nodes(p.values, [checks.CallToCheck(-1, c.label, c.operands, c.results)
                                                   for c in p.calls])
            needed |= {node for node in [*p.lifted.inputs, *p.values.values()]
                       if checks.keeps_example_value(node, read)}
        try:
            examples = checks.example_values(graph_module, example_inputs, needed)
        except Exception as error:  # noqa: BLE001 - then those replacements cannot be checked
            report.notes.append(f"example values for the checks: {_first_line(error)}")
    accepted: list[tuple[_Planned, ComposedReplacement]] = []
    for index, planned in enumerate(candidates):
        rid = planned.doc.get("id")
        planned.seed = 1000 + index
        try:
            for call in planned.calls:
                call.id = ops.register_call(call.doc, call.library, entry=call.entry)
        except (ValueError, KernelLoadError, RuntimeError) as error:
            report.leave(planned.what, f"call {call.label}: {error}", rid, "check")
            continue
        try:
            planned.tensors = {vid: transforms.evaluate(entry, [_source_value(graph_module, node)
                                                               for node in sources])
                               for vid, (entry, sources) in planned.derived.items()}
        except transforms.TransformError as error:
            report.leave(planned.what, str(error), rid, "check")
            continue
        entry = ComposedReplacement(
            id=rid if rid is not None else index, label=str(planned.doc.get("label", rid)),
            rule=str(planned.doc.get("rule", "")), pattern=str(planned.doc.get("pattern", "")),
            nodes=list(planned.doc.get("nodes", [])),
            implementation="kernels" if on_gpu else ("host kernels" if all(c.library for c in planned.calls)
                                                     else "host reference"),
            calls=[ComposedCall(label=c.label, kind=str(c.doc.get("kind", "")),
                                summary=str(c.doc.get("summary", "")),
                                config=str(c.doc.get("config") or ""),
                                config_source=str(c.doc.get("config_source") or ""),
                                kernel=str(c.kernel.get("name", "")), tolerance=c.tolerance)
                   for c in planned.calls])
        if verify:
            tolerances = _tolerances(planned)
            if any(value is None for value in tolerances.values()):
                report.leave(planned.what, "the plan gives no tolerance to verify against", rid, "verify")
                continue
            verdict = checks.check(
                planned.lifted, graph_module, planned.values,
                [checks.CallToCheck(c.id, c.label, c.operands, c.results) for c in planned.calls],
                list(planned.outputs), tolerances, device, seed=planned.seed, examples=examples,
                derived=planned.derived)
            entry.errors = verdict.errors
            entry.rel_err, entry.tolerance = verdict.worst
            if verdict.failure:
                report.leave(planned.what, f"verification failed: {verdict.failure}", rid, "verify")
                continue
            entry.verified = True
        accepted.append((planned, entry))
    if time_each:
        accepted = _faster_than_their_subgraphs(accepted, graph_module, examples, device,
                                                replacement_timer, report)
    elif on_gpu and accepted:
        report.notes.append("replacement_guard off: the replacements were not timed against the "
                            "subgraphs they replace")

    if not accepted:
        return unoptimized(None)

    # 3. Rewrite: one fact::launch per call, then a valid order again.
    def where(node):
        return (node.name, node.op, str(node.target))

    subgraphs = [ReplacedSubgraph(
        label=entry.label, rule=entry.rule, summary="; ".join(c.summary for c in entry.calls),
        kernels=[c.kernel for c in entry.calls], module=planned.lifted.module,
        inputs=[where(node) for node in planned.lifted.inputs],
        values={vid: where(node) for vid, node in planned.values.items()},
        calls=[(c.id, list(c.operands), [r[0] for r in c.results]) for c in planned.calls],
        outputs=list(planned.outputs), derived=dict(planned.tensors))
        for planned, entry in accepted]
    redirect: dict = {}
    refresh: list[_DerivedBuffer] = []
    for planned, entry in accepted:
        refresh += _register_derived(graph_module, planned)
        if planned.derived:
            entry.derived = [f"{vid}: {doc.get('purpose') or 'derived'}"
                             for vid, (doc, _) in planned.derived.items()]
        kept = _insert(graph, planned, redirect)
        if kept:
            report.notes.append(f"{planned.what}: nodes {', '.join(kept)} stay (still used "
                                f"outside the replacement)")
        report.composed.append(entry)
    _stable_topological_sort(graph)
    graph.lint()
    graph_module.recompile()

    composed = ComposedModule(module, graph_module, signature, report)
    composed.__dict__["replacements"] = subgraphs
    composed.__dict__["_derived"] = refresh
    report.runs = "composed"
    if remainder == "inductor":
        _compile_remainder(composed, example_inputs)
    else:
        report.remainder = "eager"
    if cuda_graphs:
        if on_gpu:
            _capture_cuda_graph(composed, example_inputs)
        else:
            report.cuda_graphs = f"off (asked for; CUDA graphs need CUDA inputs, these are on {device.type})"
    timer = _module_timer(speed_guard, on_gpu)
    if timer is not None:
        _never_slower(composed, module, example_inputs, timer)
    elif not speed_guard:
        report.notes.append("speed_guard=False: not compared with torch.compile of the original")
    return done(composed)


# --------------------------------------------------------------------------------------------
# Planning (engine)


def _unplanned_doc(precision: str | None, device: torch.device, example_inputs: tuple,
                   patterns: list[str] | None, reason: str, capture_name: str = "") -> dict:
    return {"schema": PLAN_SCHEMA, "abi_version": None, "precision": precision or "",
            "device": device.type, "inputs": _input_specs(example_inputs), "status": "unplanned",
            "reason": reason, "capture": capture_name, "patterns": patterns, "kernels": {},
            "replacements": [], "notes": []}


def plan(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, precision: str | None = None,
         *, work_dir: str | Path | None = None, patterns: Iterable[str] | str | None = None,
         tune: int = 0, compile_kernels: bool | None = None,
         tuning_db: str | Path | None = None, compile_jobs: int = 0) -> Path:
    """Plans the composition of `module` for `example_inputs` and returns the folder holding
    `plan.json` (`work_dir`, or a fresh temporary folder).

    Captures the module as graph JSON (fact.graph_capture) and calls the engine in process
    (`fact_engine_plan`), which discovers, realizes and, with `tune` > 0 on a GPU, tunes, and
    writes the plan (docs/plan.md). `precision`: strict | tf32 | native, or None for the
    engine's choice from the graph's dtype. `compile_kernels` None compiles when the inputs are
    on a GPU. `tuning_db`: the tuning database to read stored choices from and to store tuned
    ones in (None: the engine's default, <FACT cache root>/tuning_db.json). `compile_jobs`:
    parallel kernel compiles (0: one per core). Raises ValueError for an unknown precision;
    everything else that goes wrong (capture, a missing engine) is written as an "unplanned"
    plan with the reason."""
    if precision is not None and precision not in engine_tables.precisions():
        raise ValueError(f"precision must be one of {', '.join(engine_tables.precisions())}, not '{precision}'")
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    folder = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="fact_compose_"))
    folder.mkdir(parents=True, exist_ok=True)
    selected = _normalize_patterns(patterns)
    compile_kernels = device.type == "cuda" if compile_kernels is None else bool(compile_kernels)

    def unplanned(reason: str, capture_name: str = "") -> Path:
        doc = _unplanned_doc(precision, device, example_inputs, selected, reason, capture_name)
        (folder / PLAN_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        return folder

    if device.type not in ("cpu", "cuda"):
        return unplanned(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                         f"(host reference) only")
    graph_json = folder / "graph.json"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = capture(module, example_inputs, graph_json)
    except CaptureError as error:
        return unplanned(f"cannot be exported with torch.export, nor captured: {error}")
    except Exception as error:  # noqa: BLE001
        return unplanned(f"capture failed: {_first_line(error)}")
    capture_name = graph["source"]["capture"]
    if capture_name != "torch.export":
        export_error = (graph["source"].get("export_error") or "").splitlines()[:1] or [""]
        return unplanned(f"cannot be exported with torch.export ({export_error[0]}); composition "
                         f"needs one exported graph", capture_name)
    request = {"graph": str(graph_json), "out_dir": str(folder), "precision": precision or "",
               "compile": compile_kernels, "tune": int(tune), "patterns": selected,
               "tuning_db": str(tuning_db) if tuning_db is not None else None,
               "device_profile": None, "jobs": int(compile_jobs), "progress": False,
               "inputs": _input_specs(example_inputs), "device": device.type}
    try:
        code, response = _engine.engine_library().plan(request)
    except _engine.EngineNotFound as error:
        return unplanned(str(error), capture_name)
    plan_file = folder / PLAN_FILE
    if code != 0 or response.get("status") != "ok" or not plan_file.is_file():
        return unplanned(f"the engine wrote no plan: {response.get('error') or response}", capture_name)
    return folder


def engine_can_plan() -> tuple[bool, str]:
    """(whether plan() can reach the engine's fact_engine_plan here, why not)."""
    try:
        library = _engine.engine_library()
    except _engine.EngineNotFound as error:
        return False, str(error)
    if not library.has("fact_engine_plan"):
        return False, f"the engine library {library.path} does not export fact_engine_plan yet"
    return True, ""


# --------------------------------------------------------------------------------------------
# Public API


def optimize(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
             precision: str | None = None, *, work_dir: str | Path | None = None,
             remainder: str = "inductor", cuda_graphs: bool = False,
             patterns: Iterable[str] | str | None = None, tune: int = 0,
             verify: bool = True, speed_guard: Union[bool, Timer] = True,
             replacement_guard: Union[bool, Timer, None] = None,
             tuning_db: str | Path | None = None, compile_jobs: int = 0) -> ComposedModule:
    """Returns `module` with the engine's planned replacements composed as `fact::launch`
    calls: `plan` (engine) then `apply_plan` (see both, and docs/compose.md).

    precision: "strict" | "tf32" | "native", or None (the engine's choice from the graph's
    dtype). remainder: "inductor" (torch.compile of the rewritten graph, eager on failure) or
    "eager". cuda_graphs: capture the planned signature's forward into a CUDA graph (CUDA
    inputs). patterns: None = all, else rule or pattern names to compose. tune: 0 = the
    engine's configuration (a stored tuned one when there is one); N > 0 = tune over at most N
    configurations on the GPU first. verify: check every replacement against the subgraph it
    replaces. speed_guard: never slower than torch.compile of the original; replacement_guard:
    no replacement slower than the subgraph it replaces (both: apply_plan).
    tuning_db, compile_jobs: the tuning database and the parallel kernel compiles (see plan). Never
    raises for a module that runs (ValueError for an unknown precision or remainder); the
    report is `.fact_report`, also written to `<work_dir>/report.json`."""
    if precision is not None and precision not in engine_tables.precisions():
        raise ValueError(f"precision must be one of {', '.join(engine_tables.precisions())}, not '{precision}'")
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, not '{remainder}'")
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    if device.type == "cpu" and precision == "tf32":
        report = FactReport(precision=precision, device=str(device))
        report.leave("module", "precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are "
                               "on the CPU, where only 'strict' and 'native' compose (with the "
                               "host reference)", stage="module")
        report.runs = "the original eagerly"
        return ComposedModule(module, None, None, report)
    folder = plan(module, example_inputs, precision, work_dir=work_dir, patterns=patterns,
                  tune=tune, tuning_db=tuning_db, compile_jobs=compile_jobs)
    return apply_plan(module, example_inputs, folder, remainder=remainder,
                      cuda_graphs=cuda_graphs, verify=verify, report_path=folder / "report.json",
                      speed_guard=speed_guard, replacement_guard=replacement_guard)


def __getattr__(name: str):
    """PRECISIONS, the precision modes' names, from the engine's table (fact_engine_tables)."""
    if name == "PRECISIONS":
        return engine_tables.precisions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
