"""Nodes added to, or re-evaluated in, an exported program's graph by the export rewrites
(fact.patch_gemms, fact.transposed_linears, fact.transposed_linear_outputs): each keeps the value PyTorch computes for it on
its arguments' meta values (fake tensors, under their fake mode) and the source metadata of
the node it stands for, as torch.export would have recorded them."""
from __future__ import annotations

from typing import Any

import torch

# The copies an export rewrite reads a layout through: `contiguous`, and `clone` (to the
# contiguous format where the exported code asked for one).
COPIES = {torch.ops.aten.contiguous.default, torch.ops.aten.clone.default}

# What a new node takes over from the node it stands for: where it came from in the source.
_SOURCE_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node", "torch_fn")


def evaluate(target: Any, args: tuple, kwargs: dict, like: torch.fx.Node, values: dict | None = None) -> Any:
    """target(*args, **kwargs) on the arguments' meta values (or `values[node]` where given),
    under the fake mode of `like`'s value when it has one."""
    values = values or {}
    def value_of(arg: torch.fx.Node) -> Any:
        return values[arg] if arg in values else arg.meta["val"]
    args = torch.fx.node.map_arg(args, value_of)
    kwargs = torch.fx.node.map_arg(kwargs, value_of)
    fake_mode = getattr(like.meta.get("val"), "fake_mode", None)
    if fake_mode is not None:
        with fake_mode:
            return target(*args, **kwargs)
    return target(*args, **kwargs)


def add_call(graph: torch.fx.Graph, template: torch.fx.Node, target: Any, *args: Any,
             **kwargs: Any) -> torch.fx.Node:
    """A call of `target` inserted at the graph's insert point, with its value (evaluate) and
    `template`'s source metadata."""
    node = graph.call_function(target, args, kwargs)
    for key in _SOURCE_META:
        if key in template.meta:
            node.meta[key] = template.meta[key]
    node.meta["val"] = evaluate(target, args, kwargs, template)
    return node
