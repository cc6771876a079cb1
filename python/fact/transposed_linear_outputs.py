"""Linears whose rows are put back in another order afterwards: one linear over rows already in
that order.

nn.MultiheadAttention with `batch_first=True` (torchvision's ViT) works in `[T, B, E]` order.
After the attention it merges the heads as `permute(o, [2, 0, 1, 3])` (o is `[B, H, T, D]`),
views that as `T·B` rows of `E`, runs the out-projection, views the result as `[T, B, E]` and
transposes it back to `[B, T, E]`. The values are right, but the block's output is a transposed
tensor: the residual add behind it takes that layout, and so does the whole residual stream of
every later block. A GEMM epilogue cannot read such a residual (its rows are not one strided run),
so neither the out-projection nor the MLP's second GEMM absorbs its residual add, and every
LayerNorm reads the stream across the batch.

A linear acts on each row alone, so the same values come out of
`linear(view(contiguous(transpose(o, 1, 2)), [B, T, E]))` — the head merge GPT-2, BERT and
minGPT write, which FACT's attention kernel writes directly (patterns/attention/README.md, "Head
merge") — already in `[B, T, E]` order. `rewrite_transposed_linear_outputs(graph_module)`
rewrites an exported graph to that form when

- the linear's input is `view` / `reshape(permute(o, P), [R, K])` of a 4-D `o` (a contiguous
  copy between the two allowed), the permuted tensor's first two dims making the rows R and its
  last two the features K;
- the linear's only reader views it as `[u0, u1, N]` (the permuted tensor's first two dims) and
  that view's only reader swaps those two dims (`transpose(·, 0, 1)` or `permute(·, [1, 0, 2])`);
- every size involved is a plain integer (a symbolic batch keeps the graph as it is);
- every later node, evaluated again on the new layout, gives the same shapes and dtypes (a view
  that the new strides would not allow refuses the rewrite), and no graph output changes its
  strides.

The later nodes' recorded values (`meta["val"]`) take their new strides, so that what FACT
captures describes the tensors the rewritten graph computes."""
from __future__ import annotations

from typing import Any

import torch

from fact.export_nodes import COPIES, add_call, evaluate

aten = torch.ops.aten

_LINEAR = aten.linear.default
_ROW_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default}


def _static(sizes: Any) -> bool:
    return all(isinstance(s, int) for s in sizes)


def _swaps_first_two(node: torch.fx.Node) -> bool:
    """Whether `node` is transpose(·, 0, 1) or permute(·, [1, 0, 2]) of a 3-D value."""
    if node.op != "call_function":
        return False
    if node.target is aten.transpose.int:
        return sorted(d % 3 for d in node.args[1:3]) == [0, 1]
    if node.target is aten.permute.default:
        return [d % 3 for d in node.args[1]] == [1, 0, 2]
    return False


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _match(linear: torch.fx.Node) -> dict | None:
    """The nodes of the form the module docstring describes around `linear`, else None."""
    rows = linear.args[0]
    if not isinstance(rows, torch.fx.Node) or rows.op != "call_function" or rows.target not in _ROW_VIEWS:
        return None
    permuted = rows.args[0]
    copy = None
    if isinstance(permuted, torch.fx.Node) and permuted.target in COPIES and len(permuted.users) == 1:
        copy, permuted = permuted, permuted.args[0]
    if not isinstance(permuted, torch.fx.Node) or permuted.target is not aten.permute.default:
        return None
    source = permuted.args[0]
    source_value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    permuted_value, rows_value = permuted.meta.get("val"), rows.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in (source_value, permuted_value, rows_value)):
        return None
    if source_value.dim() != 4 or rows_value.dim() != 2:
        return None
    u = tuple(permuted_value.shape)
    if not _static(u) or tuple(rows_value.shape) != (u[0] * u[1], u[2] * u[3]):
        return None
    split = _only_user(linear)
    if split is None or split.op != "call_function" or split.target not in _ROW_VIEWS:
        return None
    split_value = split.meta.get("val")
    if not isinstance(split_value, torch.Tensor) or split_value.dim() != 3 or \
            tuple(split_value.shape[:2]) != u[:2] or not _static(split_value.shape):
        return None
    swap = _only_user(split)
    if swap is None or not _swaps_first_two(swap):
        return None
    order = [d % 4 for d in permuted.args[1]]
    return {"rows": rows, "copy": copy, "permuted": permuted, "source": source, "split": split, "swap": swap,
            "order": [order[1], order[0], order[2], order[3]], "merged_shape": [u[1], u[0], u[2] * u[3]]}


def _same_layout(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor):
        return (tuple(before.shape) == tuple(after.shape) and before.stride() == after.stride()
                and before.dtype == after.dtype)
    if isinstance(before, (tuple, list)) and isinstance(after, (tuple, list)):
        return len(before) == len(after) and all(_same_layout(b, a) for b, a in zip(before, after))
    return type(before) is type(after) and not isinstance(before, torch.Tensor)


def _same_shapes(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor):
        return tuple(before.shape) == tuple(after.shape) and before.dtype == after.dtype
    if isinstance(before, (tuple, list)) and isinstance(after, (tuple, list)):
        return len(before) == len(after) and all(_same_shapes(b, a) for b, a in zip(before, after))
    return not isinstance(before, torch.Tensor) and not isinstance(after, torch.Tensor)


def _later_values(graph: torch.fx.Graph, swap: torch.fx.Node, new_value: Any) -> dict | None:
    """The values of the nodes after `swap` that change when `swap`'s value is `new_value`
    (evaluated again in graph order), or None when one cannot be evaluated, changes its shape
    or dtype, or a graph output would change."""
    changed: dict = {swap: new_value}
    after = False
    for node in graph.nodes:
        if node is swap:
            after = True
            continue
        if not after or not any(arg in changed for arg in node.all_input_nodes):
            continue
        if node.op == "output":
            return None
        if node.op != "call_function":
            return None
        try:
            value = evaluate(node.target, node.args, node.kwargs, node, changed)
        except Exception:  # noqa: BLE001 - a later op refusing the new layout refuses the rewrite
            return None
        before = node.meta.get("val")
        if not _same_shapes(before, value):
            return None
        if not _same_layout(before, value):
            changed[node] = value
    del changed[swap]
    return changed


def rewrite_transposed_linear_outputs(graph_module: torch.fx.GraphModule) -> list[str]:
    """Rewrites each linear of the form the module docstring describes into the linear over
    rows in the final order; returns the new linears' names. The graph module is recompiled
    when anything changed."""
    graph = graph_module.graph
    rewritten = []
    for linear in list(graph.nodes):
        if linear.op != "call_function" or linear.target is not _LINEAR:
            continue
        found = _match(linear)
        if found is None:
            continue
        source, order = found["source"], found["order"]
        if order == [0, 2, 1, 3]:
            moved_call = (aten.transpose.int, (source, 1, 2))
        else:
            moved_call = (aten.permute.default, (source, order))
        moved = evaluate(*moved_call, {}, found["permuted"])
        copied = evaluate(aten.contiguous.default, (moved,), {}, found["permuted"])
        merged = evaluate(aten.view.default, (copied, found["merged_shape"]), {}, found["rows"])
        output = evaluate(_LINEAR, (merged,) + tuple(linear.args[1:]), linear.kwargs, linear)
        later = _later_values(graph, found["swap"], output)
        if later is None:
            continue
        with graph.inserting_before(linear):
            moved_node = add_call(graph, found["permuted"], moved_call[0], *moved_call[1])
            copied_node = add_call(graph, found["permuted"], aten.contiguous.default, moved_node)
            merged_node = add_call(graph, found["rows"], aten.view.default, copied_node, found["merged_shape"])
            new_linear = add_call(graph, linear, _LINEAR, merged_node, *linear.args[1:], **linear.kwargs)
        found["swap"].replace_all_uses_with(new_linear)
        for dead in (found["swap"], found["split"], linear, found["rows"], found["copy"], found["permuted"]):
            if dead is not None and not dead.users:
                graph.erase_node(dead)
        for node, value in later.items():
            node.meta["val"] = value
        rewritten.append(new_linear.name)
    if rewritten:
        graph.lint()
        graph_module.recompile()
    return rewritten
