"""A planned replacement mapped onto the exported graph by value id and checked against it
(nodes, inputs, outputs, derived operands, call operand dtypes, result layouts, kernel
libraries); `_Decline` carries the difference when it does not fit."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx

from fact import ops, transforms
from fact import verify as checks
from fact.compose.plan_file import USABLE_KERNEL_STATUSES, replacement_label
from fact.symbolic_sizes import Poly, parse_size


class _Decline(Exception):
    """A replacement that stays PyTorch; the message is the reason."""


@dataclass
class _PlannedCall:
    doc: dict
    label: str
    operands: list[str]
    results: list[tuple]           # (value id, shape, stride, dtype, alloc_shape or None)
    tolerance: float | None
    library: str | None
    entry: str | None
    kernel: dict
    id: int = -1
    buckets: list | None = None    # (library, entry) per bucket tuple (a plan over symbols, on CUDA)


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


def _same_layout(meta: torch.Tensor, dtype: torch.dtype, shape: list, stride: list, binding: Any) -> bool:
    """The graph value has the planned dtype, shape and stride: equal integers for a static
    plan; for a plan over symbols (`binding`), equal values at several assignments of the
    symbols (the program's SymInts against the plan's polynomials)."""
    if meta.dtype != dtype or meta.dim() != len(shape) or len(stride) != len(shape):
        return False
    if binding is None:
        return (list(meta.shape), list(meta.stride())) == (shape, stride)
    return all(binding.same(got, want) for got, want in zip([*meta.shape, *meta.stride()], [*shape, *stride]))


def _resolve(replacement: dict, doc: dict, graph_module: torch.fx.GraphModule,
             by_name: dict, by_target: dict, claimed: dict, on_gpu: bool,
             library_root: Path, binding: Any = None) -> _Planned:
    """The replacement mapped onto the exported graph and checked against it; _Decline with
    the difference otherwise. Registers nothing. `binding`: a plan over symbols
    (fact.compose.dynamic_plan.SymbolBinding): sizes are compared symbolically, and each
    call's bucket kernels are resolved too."""
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
    count = len(doc.get("symbols") or [])
    for call in replacement.get("calls", []):
        label = str(call.get("label", ""))
        try:
            ops.check_call(call, doc.get("symbols"))
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
            alloc = result.get("alloc_shape")
            try:
                spec = (vid, [parse_size(v, count, f"result {vid}") for v in result.get("shape", [])],
                        [parse_size(v, count, f"result {vid}") for v in result.get("stride", [])], dtype,
                        [int(v) for v in alloc] if alloc is not None else None)
            except ValueError as error:
                raise _Decline(f"call {label}: {error}") from None
            node = by_name.get(vid)
            if node is not None:
                meta = _meta(node, graph_module)
                if not isinstance(meta, torch.Tensor):
                    raise _Decline(f"call {label}: result {vid} is not a tensor in the graph")
                # A result with an allocation (padded rows) is the graph's dense value written
                # as a view of it: the graph has its shape with contiguous strides.
                layout = (spec[1], list(torch.empty(spec[1], device="meta").stride())) if alloc is not None \
                    else (spec[1], spec[2])
                if not _same_layout(meta, dtype, layout[0], layout[1], binding):
                    raise _Decline(f"call {label}: result {vid} is {_layout(meta)} in the graph, "
                                   f"{dtype} {_spell(spec[1])} stride {_spell(spec[2])} in the plan")
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
            library, entry = _usable_library(f"call {label}: kernel", key, kernels, library_root)
        buckets = None
        if on_gpu and count and call.get("buckets"):
            buckets = [_usable_library(f"call {label}: bucket {index}'s kernel",
                                       bucket.get("kernel") or key, kernels, library_root)
                       for index, bucket in enumerate(call["buckets"])]
        planned.calls.append(_PlannedCall(call, label, operands, results,
                                          float(tolerance) if tolerance is not None else None,
                                          library, entry, kernel, buckets=buckets))
    if not planned.calls:
        raise _Decline("the replacement has no calls")
    unproduced = [vid for vid in outputs if vid not in produced]
    if unproduced:
        raise _Decline(f"no call produces output {', '.join(unproduced)}")
    return planned


def _usable_library(what: str, key: str, kernels: dict, library_root: Path) -> tuple:
    """(library path, entry) of the plan's kernel `key` (a call's, or a bucket tuple's);
    _Decline naming `what` when it is not usable (not built, or its library is missing)."""
    kernel = kernels.get(key, {}) if key else {}
    if kernel.get("status") not in USABLE_KERNEL_STATUSES:
        why = f": {kernel['reason']}" if kernel.get("reason") else ""
        raise _Decline(f"{what} {kernel.get('name', key)} is {kernel.get('status', 'not in the plan')}{why}")
    path = Path(kernel.get("library", ""))
    path = path if path.is_absolute() else library_root / path
    if not kernel.get("library") or not path.is_file():
        raise _Decline(f"{what} library {path} does not exist")
    return str(path), kernel.get("entry") or None


def _spell(sizes: list) -> list:
    return [v.expr or str(v.terms) if isinstance(v, Poly) else v for v in sizes]


def _tolerances(planned: _Planned) -> dict:
    """Output value id -> the tolerance of the call that produces it (the last one does)."""
    tolerances = {}
    for call in planned.calls:
        for vid, *_ in call.results:
            if vid in planned.outputs:
                tolerances[vid] = call.tolerance
    return tolerances
