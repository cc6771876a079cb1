"""Linears over a transposed input that are one GEMM over the untransposed rows.

nn.MultiheadAttention with `batch_first=True` (torchvision's ViT, many hand-written encoders)
transposes its `[B, T, E]` input to `[T, B, E]` before the packed in-projection. A linear acts
on the last dim only, so `linear(x.transpose(0, 1), W, b)` equals `linear(x, W, b).transpose(0, 1)`
element for element; but exported as written its rows are not one strided run, and FACT ran it
as T products of B rows (a ViT-B/16 at batch 64: 197 products of 64 × 2304 × 768, 0.114 ms on
an H200, where one GEMM of 12608 rows takes about 0.069 ms).

`rewrite_transposed_linears(graph_module)` rewrites such a linear of an exported program's graph
into the linear over the untransposed input followed by the same transpose (or permute), when
what reads the linear's value can take it in the new memory order and gives the same values,
shapes and strides as before: every path from the linear runs through views that are valid on
any strides (unflatten, unsqueeze, squeeze, transpose, permute, select, slice, alias, detach)
and ends in a contiguous copy (`contiguous`, or `clone` to the contiguous format) whose result
has the strides it had. That is the MHA chain (`unflatten` → `unsqueeze` → `transpose` →
`squeeze` → `contiguous`), whose copy the attention's discovery then reads through
(patterns/attention/README.md, "A copy of the projection in another memory order"). Anything
else reading the linear keeps the graph as it is. The input of the rewritten linear must be
contiguous (its rows one run), a permutation must keep the last dim last, and the linear must
not be a graph output."""
from __future__ import annotations

from typing import Any

import torch

from fact.export_nodes import COPIES, add_call, evaluate

aten = torch.ops.aten

_LINEAR = aten.linear.default
# Views whose result is valid on an input of any strides (no `view` / `reshape`: those may not
# be views of a strided input), and the copies a chain may end in.
_ANY_STRIDE_VIEWS = {
    aten.unflatten.int, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.transpose.int, aten.permute.default, aten.select.int,
    aten.slice.Tensor, aten.alias.default, aten.detach.default,
}


def _order_of(node: Any) -> list[int] | None:
    """The dim order of a transpose / permute node that keeps the last dim last and moves
    another, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() < 3:
        return None
    rank = value.dim()
    if node.target is aten.transpose.int:
        first, second = (d % rank for d in node.args[1:3])
        order = list(range(rank))
        order[first], order[second] = order[second], order[first]
    elif node.target is aten.permute.default:
        order = [d % rank for d in node.args[1]]
    else:
        return None
    if order[-1] != rank - 1 or order == list(range(rank)):
        return None
    return order


def _chain(linear: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The nodes reading the linear's value, in graph order, when every path from it runs
    through _ANY_STRIDE_VIEWS and ends in a node of COPIES; None otherwise."""
    reached, frontier = [], [linear]
    while frontier:
        node = frontier.pop()
        for user in node.users:
            if user in reached:
                continue
            if user.op != "call_function":
                return None
            if user.target in COPIES:
                reached.append(user)
            elif user.target in _ANY_STRIDE_VIEWS:
                reached.append(user)
                frontier.append(user)
            else:
                return None
    order = {node: index for index, node in enumerate(linear.graph.nodes)}
    return sorted(reached, key=order.__getitem__)


def _chain_values(linear: torch.fx.Node, source: torch.fx.Node, order: list[int],
                  chain: list[torch.fx.Node]) -> dict | None:
    """The fake values of the chain's nodes after the rewrite, or None when a copy at its end
    would change its strides."""
    untransposed = evaluate(linear.target, (source,) + tuple(linear.args[1:]), linear.kwargs, linear)
    values: dict = {linear: untransposed.permute(order)}
    for node in chain:
        values[node] = evaluate(node.target, node.args, node.kwargs, node, values)
        if node.target in COPIES:
            before, after = node.meta["val"], values[node]
            if tuple(before.shape) != tuple(after.shape) or before.stride() != after.stride():
                return None
    return values


def rewrite_transposed_linears(graph_module: torch.fx.GraphModule) -> list[str]:
    """Rewrites each linear over a transposed input whose readers allow it (the module
    docstring) into the linear over the untransposed input and the same transpose; returns the
    rewritten linears' names. The graph module is recompiled when anything changed."""
    graph = graph_module.graph
    rewritten = []
    for linear in list(graph.nodes):
        if linear.op != "call_function" or linear.target is not _LINEAR:
            continue
        transposed = linear.args[0]
        order = _order_of(transposed)
        if order is None:
            continue
        source = transposed.args[0]
        source_value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if not isinstance(source_value, torch.Tensor) or not source_value.is_contiguous():
            continue
        if any(user.op == "output" for user in linear.users):
            continue
        chain = _chain(linear)
        if not chain:
            continue
        values = _chain_values(linear, source, order, chain)
        if values is None:
            continue
        with graph.inserting_before(linear):
            untransposed = add_call(graph, linear, _LINEAR, source, *linear.args[1:], **linear.kwargs)
            permuted = add_call(graph, linear, aten.permute.default, untransposed, order)
        linear.replace_all_uses_with(permuted)
        graph.erase_node(linear)
        if not transposed.users:
            graph.erase_node(transposed)
        for node in chain:
            node.meta["val"] = values[node]
        rewritten.append(untransposed.name)
    if rewritten:
        graph.lint()
        graph_module.recompile()
    return rewritten
