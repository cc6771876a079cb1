"""One ATen-level FX graph -> the values and nodes of a FACT graph JSON document
(schema: docs/graph_json.md), and the document's text form."""
from __future__ import annotations

import json
import math
import operator
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.fx

from fact.capture_errors import CaptureError  # noqa: F401  (re-exported: fact.graph_writer.CaptureError)

SCHEMA = "fact.graph/1"

# Ops that only check metadata at run time and produce nothing: not part of the computation.
_ASSERTION_TARGETS = frozenset({
    "aten._assert_tensor_metadata.default",
    "aten._assert_async.default",
    "aten._assert_async.msg",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range.default",
    "aten.sym_constrain_range_for_size.default",
    "aten._functional_assert_async.msg",
    "aten._functional_assert_scalar.default",
})


def is_assertion(node: torch.fx.Node) -> bool:
    """A call that only checks metadata at run time and produces nothing (_ASSERTION_TARGETS)."""
    return node.op == "call_function" and target_name(node.target) in _ASSERTION_TARGETS


# Higher-order ops whose body is written in their place: grad mode does not change what an
# inference graph computes. Other higher-order ops stay opaque nodes, their body as {"repr"}.
_INLINED_WRAPPERS = frozenset({"higher_order.wrap_with_set_grad_enabled"})




# --------------------------------------------------------------------------------------------
# Spelling of torch objects in the JSON document


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _concrete_int(x: Any) -> int:
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        return int(hint) if hint is not None else int(x)
    return int(x)


def _concrete_scalar(x: Any) -> Any:
    if isinstance(x, torch.SymInt):
        return _concrete_int(x)
    if isinstance(x, torch.SymFloat):
        hint = x.node.hint
        return float(hint) if hint is not None else float(x)
    if isinstance(x, torch.SymBool):
        hint = x.node.hint
        return bool(hint) if hint is not None else bool(x)
    return x


def _non_finite_name(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _tensor_fields(t: torch.Tensor) -> dict:
    return {
        "shape": [_concrete_int(s) for s in t.shape],
        "stride": [_concrete_int(s) for s in t.stride()],
        "dtype": dtype_name(t.dtype),
        "device": str(t.device),
    }


def scalar_of(t: Any) -> Any:
    """The value of a 0-d tensor whose data is at hand (not meta, not fake), else None."""
    if not isinstance(t, torch.Tensor) or t.dim() != 0 or t.device.type == "meta":
        return None
    if isinstance(t, torch._subclasses.fake_tensor.FakeTensor):
        return None
    try:
        value = float(t.detach().cpu().item())
    except Exception:  # noqa: BLE001 - complex, quantized or otherwise unreadable data
        return None
    return value if math.isfinite(value) else _non_finite_name(value)


# --------------------------------------------------------------------------------------------
# FX graph -> document


class _SymValue:
    """A size computed from declared dynamic dimensions: written as {"sym": expression}."""

    def __init__(self, expression: str):
        self.expression = expression

    def __repr__(self) -> str:
        return f"<size {self.expression}>"


class _Unwritable:
    """A non-integer value computed from declared dynamic dimensions (a SymBool a run-time
    assertion reads): nothing FACT writes; a capture error only where an argument uses it."""

    def __init__(self, message: str):
        self.message = message


_SYMBOLIC_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool)


class GraphWriter:
    """Turns one ATen-level FX graph into values and nodes of the document. With
    `symbol_names` (sympy symbol of the exported program -> declared dimension name), sizes
    over those symbols are written as expressions and size-only nodes are not written
    (docs/dynamic_shapes.md)."""

    def __init__(self, id_prefix: str = "", symbol_names: dict | None = None):
        self.symbol_names = dict(symbol_names or {})
        self.id_prefix = id_prefix
        self.values: list[dict] = []
        self.nodes: list[dict] = []
        self.value_ids: set[str] = set()
        # FX node -> value id (single tensor), list of value ids (tuple results), or a
        # concrete non-tensor value (sym ints ...).
        self.node_values: dict[torch.fx.Node, Any] = {}

    # -- values

    def add_value(self, value_id: str, kind: str, tensor: torch.Tensor, target: str | None = None,
                  scalar: Any = None) -> str:
        if value_id in self.value_ids:
            raise CaptureError(f"duplicate value id '{value_id}'")
        entry = {"id": value_id, "kind": kind}
        if target is not None:
            entry["target"] = target
        entry.update(self._tensor_fields(tensor))
        if scalar is not None:
            entry["scalar"] = scalar
        self.values.append(entry)
        self.value_ids.add(value_id)
        return value_id

    def _tensor_fields(self, t: torch.Tensor) -> dict:
        if not self.symbol_names:
            return _tensor_fields(t)
        from fact.size_expressions import size_of
        fields = _tensor_fields(t)
        fields["shape"] = [size_of(s, self.symbol_names) for s in t.shape]
        fields["stride"] = [size_of(s, self.symbol_names) for s in t.stride()]
        return fields

    def _scalar(self, val: Any) -> Any:
        """A non-tensor node value: its expression when it depends on declared dimensions,
        else the concrete value."""
        if self.symbol_names and isinstance(val, _SYMBOLIC_SCALARS):
            expr = val.node.expr
            if expr.free_symbols:
                if not isinstance(val, torch.SymInt):
                    return _Unwritable(f"a {type(val).__name__} computed from dynamic dimensions "
                                       f"({expr}) is used as an argument; FACT writes integer "
                                       f"size expressions only")
                from fact.size_expressions import size_of
                return _SymValue(size_of(val, self.symbol_names))
        return _concrete_scalar(val)

    def _size_only(self, node: torch.fx.Node, val: Any) -> bool:
        """A node that only computes a size or a condition on sizes (sym_size, operator.mul on
        SymInts, ...): in a symbolic graph its value is written where it is used."""
        return bool(self.symbol_names) and node.op == "call_function" and \
            isinstance(val, (*_SYMBOLIC_SCALARS, int, float, bool)) and \
            target_name(node.target) != "aten._local_scalar_dense.default"

    def add_placeholder(self, node: torch.fx.Node, kind: str, target: str | None = None,
                        scalar: Any = None, value_id: str | None = None) -> None:
        val = node.meta.get("val", node.meta.get("example_value"))
        if isinstance(val, torch.Tensor):
            vid = value_id or self.id_prefix + node.name
            self.node_values[node] = self.add_value(vid, kind, val, target, scalar)
        else:
            self.node_values[node] = self._scalar(val)

    def add_get_attr(self, node: torch.fx.Node, owner: torch.nn.Module) -> None:
        """A get_attr naming a subgraph (the body of a higher-order op such as
        wrap_with_set_grad_enabled); tensors are never get_attr in an exported graph."""
        attribute = owner
        for part in node.target.split("."):
            attribute = getattr(attribute, part)
        if not isinstance(attribute, torch.fx.GraphModule):
            raise CaptureError(f"unsupported get_attr node '{node.name}' ({type(attribute).__name__})")
        self.node_values[node] = _Subgraph(node.target, attribute)

    def bind(self, node: torch.fx.Node, value_id: str) -> None:
        """Makes `node` stand for an already defined value (linking subgraphs)."""
        self.node_values[node] = value_id

    # -- nodes

    def add_call(self, node: torch.fx.Node) -> None:
        if node.target is operator.getitem and node.args[0] in self.node_values:
            source = self.node_values[node.args[0]]
            if isinstance(source, list):
                self.node_values[node] = source[node.args[1]]
                return
        target = target_name(node.target)
        if target in _ASSERTION_TARGETS and not node.users:
            return
        if target in _INLINED_WRAPPERS and isinstance(self.node_values.get(node.args[1]), _Subgraph):
            self._inline(node, self.node_values[node.args[1]].module, node.args[2:])
            return
        val = node.meta.get("val", node.meta.get("example_value"))
        if self._size_only(node, val):
            self.node_values[node] = self._scalar(val)
            return
        outputs: list[str] = []
        if isinstance(val, torch.Tensor):
            vid = self.id_prefix + node.name
            self.add_value(vid, "intermediate", val)
            outputs.append(vid)
            self.node_values[node] = vid
        elif isinstance(val, (tuple, list)):
            getitem_names = {user.args[1]: user.name for user in node.users
                             if user.target is operator.getitem}
            elements: list[Any] = []
            for index, element in enumerate(val):
                if isinstance(element, torch.Tensor):
                    name = getitem_names.get(index, f"{node.name}.{index}")
                    vid = self.add_value(self.id_prefix + name, "intermediate", element)
                    outputs.append(vid)
                    elements.append(vid)
                else:
                    elements.append(self._scalar(element))
            self.node_values[node] = elements
        else:
            self.node_values[node] = self._scalar(val)
        self.nodes.append({
            "id": self.id_prefix + node.name,
            "target": target,
            "args": [self.encode_arg(a) for a in node.args],
            "kwargs": {k: self.encode_arg(v) for k, v in node.kwargs.items()},
            "outputs": outputs,
        })

    def _inline(self, node: torch.fx.Node, body: torch.fx.GraphModule, args: Sequence[Any]) -> None:
        """Writes the body's nodes in place of `node` (ids prefixed '<node>.'), whose tuple result
        becomes the body's outputs."""
        prefix = self.id_prefix
        self.id_prefix = f"{prefix}{node.name}."
        try:
            placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
            for placeholder, arg in zip(placeholders, args):
                self.node_values[placeholder] = self.node_values.get(arg) if isinstance(arg, torch.fx.Node) else arg
            for inner in body.graph.nodes:
                if inner.op == "get_attr":
                    self.add_get_attr(inner, body)
                elif inner.op == "call_function":
                    self.add_call(inner)
            results = [self.node_values.get(n) if isinstance(n, torch.fx.Node) else n
                       for n in flat_output_nodes(body.graph)]
        finally:
            self.id_prefix = prefix
        self.node_values[node] = results

    # -- arguments

    def encode_arg(self, arg: Any) -> dict:
        if isinstance(arg, torch.fx.Node):
            bound = self.node_values.get(arg)
            if isinstance(bound, str):
                return {"tensor": bound}
            if isinstance(bound, list):
                return {"tensors": [e if isinstance(e, str) else None for e in bound]}
            return self.encode_constant(bound)
        if isinstance(arg, (list, tuple)):
            if any(isinstance(a, torch.fx.Node) and isinstance(self.node_values.get(a), str)
                   for a in arg):
                tensors = []
                for a in arg:
                    if a is None:
                        tensors.append(None)
                    elif isinstance(a, torch.fx.Node) and isinstance(self.node_values.get(a), str):
                        tensors.append(self.node_values[a])
                    else:
                        return {"repr": repr(arg)}
                return {"tensors": tensors}
            items = [self.node_values.get(a) if isinstance(a, torch.fx.Node) else a for a in arg]
            for item in items:
                if isinstance(item, _Unwritable):
                    raise CaptureError(item.message)
            if any(isinstance(item, _SymValue) for item in items):
                return {"syms": [item.expression if isinstance(item, _SymValue) else _plain_constant(item)
                                 for item in items]}
            return self.encode_constant(items)
        return self.encode_constant(arg)

    def encode_constant(self, c: Any) -> dict:
        if isinstance(c, _SymValue):
            return {"sym": c.expression}
        c = self._scalar(c) if isinstance(c, _SYMBOLIC_SCALARS) else _concrete_scalar(c)
        if isinstance(c, _Unwritable):
            raise CaptureError(c.message)
        if isinstance(c, _SymValue):
            return {"sym": c.expression}
        if isinstance(c, _Subgraph):
            return {"repr": f"<subgraph {c.name}>"}
        if isinstance(c, torch.dtype):
            return {"dtype": dtype_name(c)}
        if isinstance(c, torch.device):
            return {"device": str(c)}
        if isinstance(c, float) and not math.isfinite(c):
            return {"float": _non_finite_name(c)}
        plain = _plain_constant(c)
        if plain is not _NOT_PLAIN:
            return {"const": plain}
        return {"repr": repr(c)}


class _Subgraph:
    """The body of a higher-order op, named by a get_attr node."""

    def __init__(self, name: str, module: torch.fx.GraphModule):
        self.name, self.module = name, module


_NOT_PLAIN = object()


def _plain_constant(c: Any) -> Any:
    """c as a JSON number/bool/string/null or list of those, or _NOT_PLAIN."""
    c = _concrete_scalar(c)
    if c is None or isinstance(c, (bool, int, str)):
        return c
    if isinstance(c, float):
        return c if math.isfinite(c) else _NOT_PLAIN
    if isinstance(c, (list, tuple, torch.Size)):
        items = [_plain_constant(e) for e in c]
        return _NOT_PLAIN if any(e is _NOT_PLAIN for e in items) else items
    return _NOT_PLAIN


def target_name(target: Any) -> str:
    """`aten.<name>.<overload>` for ATen ops, else the callable's qualified name."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return f"{target._qualified_op_name.replace('::', '.')}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    if module in ("_operator", "operator"):
        module = "operator"
    return f"{module}.{name}" if module else name



def flat_output_nodes(graph: torch.fx.Graph) -> list:
    """The graph's outputs, flattened in pytree order."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    return list(torch.utils._pytree.tree_leaves(output.args[0]))


def dumps_graph(doc: dict) -> str:
    """The document as text: one value or node per line, so that diffs stay readable."""
    def line(obj: Any) -> str:
        return json.dumps(obj, allow_nan=False, ensure_ascii=False)

    parts = ["{"]
    keys = list(doc.keys())
    for i, key in enumerate(keys):
        comma = "," if i + 1 < len(keys) else ""
        item = doc[key]
        if key in ("values", "nodes") and isinstance(item, list) and item:
            parts.append(f" {line(key)}: [")
            parts.extend(f"  {line(e)}{',' if j + 1 < len(item) else ''}" for j, e in enumerate(item))
            parts.append(f" ]{comma}")
        else:
            parts.append(f" {line(key)}: {line(item)}{comma}")
    parts.append("}")
    return "\n".join(parts) + "\n"


def write_graph(doc: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_graph(doc), encoding="utf-8")
