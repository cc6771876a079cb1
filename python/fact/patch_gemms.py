"""Convolutions that are GEMMs: a 2-D convolution whose kernel equals its stride, with no
padding, dilation or groups (a ViT's patch embedding, 16x16 patches at stride 16), reads every
input pixel once, into one patch. It is a GEMM of [patches, C*kh*kw] by the flattened weight.

`rewrite_patch_convolutions(graph_module)` rewrites such a convolution of an exported
program's graph into

    x[:, :, :Ho*kh, :Wo*kw]  (only where the image is not a whole number of patches)
    .reshape(-1, C, Ho, kh, Wo, kw).permute(0, 2, 4, 1, 3, 5).reshape(-1, Ho, Wo, C*kh*kw)
    linear(patches, weight.reshape(O, C*kh*kw), bias)     -> [N, Ho, Wo, O]
    .permute(0, 3, 1, 2).clone(memory_format=...)          -> [N, O, Ho, Wo], in the layout
                                                              the convolution gave

so that discovery sees the linear (a GEMM FACT realizes) instead of a convolution it has no
pattern for; the rest of the graph reads the same values, shapes and strides. The batch may be a
symbolic size; the channels, image and kernel sizes must be plain integers. Every
`module_state.export_keeping_state` applies it, so inference and training exports both see the
GEMM (in training, AOTAutograd's backward keeps PyTorch's convolution backward)."""
from __future__ import annotations

from typing import Any

import torch

from fact.export_nodes import add_call

aten = torch.ops.aten

# The ops a 2-D convolution is exported as: torch.export's training IR keeps aten.conv2d;
# AOTAutograd's graphs hold aten.convolution (with `transposed` and `output_padding`).
_CONV2D = aten.conv2d.default
_CONVOLUTION = aten.convolution.default


def _ints(value: Any, count: int) -> list[int] | None:
    """A convolution's stride / padding / dilation argument as `count` ints, or None when an
    entry is not a plain int."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * count
    if len(values) == 1:
        values = values * count
    return values if len(values) == count and all(type(v) is int for v in values) else None


def _arguments(node: torch.fx.Node) -> dict | None:
    """input, weight, bias, stride, padding, dilation and groups of a 2-D convolution node
    (aten.conv2d or a non-transposed aten.convolution), or None for any other node."""
    if node.op != "call_function" or node.target not in (_CONV2D, _CONVOLUTION):
        return None
    names = (["input", "weight", "bias", "stride", "padding", "dilation", "groups"]
             if node.target is _CONV2D else
             ["input", "weight", "bias", "stride", "padding", "dilation", "transposed",
              "output_padding", "groups"])
    defaults = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1,
                "transposed": False, "output_padding": 0}
    arguments = dict(defaults)
    arguments.update(zip(names, node.args))
    arguments.update(node.kwargs)
    if arguments["transposed"]:
        return None
    return arguments


def patch_size(node: torch.fx.Node) -> tuple[int, int] | None:
    """(kh, kw) when `node` is a 2-D convolution that is a patch GEMM: a 4-D input, a kernel
    equal to its stride and at least 2x2, no padding, dilation 1, one group, a floating dtype,
    and plain-int channel, image and kernel sizes. None otherwise."""
    arguments = _arguments(node)
    if arguments is None:
        return None
    x, weight = arguments["input"], arguments["weight"]
    if not isinstance(x, torch.fx.Node) or not isinstance(weight, torch.fx.Node):
        return None
    x_value, w_value = x.meta.get("val"), weight.meta.get("val")
    if not isinstance(x_value, torch.Tensor) or not isinstance(w_value, torch.Tensor):
        return None
    if x_value.dim() != 4 or w_value.dim() != 4 or not x_value.dtype.is_floating_point:
        return None
    if not all(type(s) is int for s in list(x_value.shape[1:]) + list(w_value.shape)):
        return None
    kh, kw = int(w_value.shape[2]), int(w_value.shape[3])
    stride = _ints(arguments["stride"], 2)
    padding = _ints(arguments["padding"], 2)
    dilation = _ints(arguments["dilation"], 2)
    if stride != [kh, kw] or padding != [0, 0] or dilation != [1, 1] or arguments["groups"] != 1:
        return None
    if kh * kw < 4 or int(x_value.shape[1]) != int(w_value.shape[1]):
        return None
    if int(x_value.shape[2]) < kh or int(x_value.shape[3]) < kw:
        return None
    if _memory_format(node) is None or any(user.op == "output" for user in node.users):
        return None  # an unusual output layout; a graph output keeps its node's name
    return kh, kw


def _memory_format(node: torch.fx.Node) -> torch.memory_format | None:
    """The layout of the convolution's result (contiguous or channels-last), or None."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    if value.is_contiguous():
        return torch.contiguous_format
    if value.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def _rewrite(graph: torch.fx.Graph, node: torch.fx.Node, kh: int, kw: int) -> torch.fx.Node:
    arguments = _arguments(node)
    x, weight, bias = arguments["input"], arguments["weight"], arguments["bias"]
    _, channels, height, width = x.meta["val"].shape
    out_channels = int(weight.meta["val"].shape[0])
    rows, cols = int(height) // kh, int(width) // kw
    depth = int(channels) * kh * kw
    with graph.inserting_before(node):
        if rows * kh != int(height):
            x = add_call(graph, node, aten.slice.Tensor, x, 2, 0, rows * kh)
        if cols * kw != int(width):
            x = add_call(graph, node, aten.slice.Tensor, x, 3, 0, cols * kw)
        # reshape, not view: a sliced or channels-last image is copied into patch order here.
        tiles = add_call(graph, node, aten.reshape.default, x, [-1, int(channels), rows, kh, cols, kw])
        tiles = add_call(graph, node, aten.permute.default, tiles, [0, 2, 4, 1, 3, 5])
        patches = add_call(graph, node, aten.reshape.default, tiles, [-1, rows, cols, depth])
        flat_weight = add_call(graph, node, aten.reshape.default, weight, [out_channels, depth])
        linear_args = (patches, flat_weight) if bias is None else (patches, flat_weight, bias)
        product = add_call(graph, node, aten.linear.default, *linear_args)
        channels_first = add_call(graph, node, aten.permute.default, product, [0, 3, 1, 2])
        result = add_call(graph, node, aten.clone.default, channels_first,
                      memory_format=_memory_format(node))
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return result


def rewrite_patch_convolutions(graph_module: torch.fx.GraphModule) -> list[str]:
    """Rewrites each patch convolution of the graph (patch_size) into view/permute, a linear and
    a contiguous copy; returns the rewritten nodes' names. The graph module is recompiled when
    anything changed."""
    rewritten = []
    for node in list(graph_module.graph.nodes):
        size = patch_size(node)
        if size is not None:
            rewritten.append(node.name)
            _rewrite(graph_module.graph, node, *size)
    if rewritten:
        graph_module.graph.lint()
        graph_module.recompile()
    return rewritten
