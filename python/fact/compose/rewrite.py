"""Rewriting the exported graph: derived operands as buffers, one `fact::launch` per planned
call inserted after the replaced nodes (operands pinned to their planned dense layout), and a
valid node order again."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx

from fact import graph_writer, transforms
from fact import verify as checks
from fact.compose.resolve import _Planned


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
                anchor: torch.fx.Node, at_hint: Any = None) -> tuple[torch.fx.Node, torch.fx.Node]:
    """The operand `node` made to have the planned dense layout in the graph itself: permute to
    the planned dim order, `contiguous`, permute back (only `contiguous` when the order is the
    identity). Eagerly these are views and a no-op `contiguous` (the exported value already has
    the planned layout); a compiler that reorders or decomposes the producer (Inductor's `cat`
    of one non-empty tensor becomes a stride-preserving `clone`, which gave phi3's rotated q/k
    another layout than the plan's) must produce it here, because fact::launch is tagged
    needs_exact_strides and takes the strides of its inputs as traced. A layout that is not
    dense (a view into a larger tensor, e.g. V sliced out of a fused QKV projection) cannot be
    produced by a copy and is left as it is (fact::launch checks it). Returns (the node to
    pass, the last node inserted or `anchor`). `at_hint` (a plan over symbols): a function giving
    a plan size or a program SymInt at the symbols' hints; the dim order is decided there (a
    dense layout's order is the same at every size)."""
    shape, stride = operand.get("shape"), operand.get("stride")
    meta = node.meta.get("val")
    if shape is None or stride is None or not isinstance(meta, torch.Tensor):
        return node, anchor
    concrete = at_hint or int
    shape, stride = [concrete(v) for v in shape], [concrete(v) for v in stride]
    if [concrete(v) for v in meta.shape] != shape:
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


def _insert(graph: torch.fx.Graph, planned: _Planned, redirect: dict, sizes: list | None = None,
            at_hint: Any = None) -> list[str]:
    """Inserts the replacement's fact::launch calls after its last node, redirects the uses of
    its outputs, erases its nodes left without users; returns the names of replaced nodes that
    stay (still used outside the replacement). `redirect` maps replaced nodes of earlier
    replacements to what now stands for them. `sizes` (a plan over symbols): the nodes giving
    the symbols' sizes, passed to every call; `at_hint`: see _pin_layout."""
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
                node, anchor = _pin_layout(graph, node, operand, anchor, at_hint)
            operands.append(node)
        with graph.inserting_after(anchor):
            launch = graph.call_function(torch.ops.fact.launch.default,
                                         (operands, call.id, list(sizes)) if sizes else (operands, call.id))
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
