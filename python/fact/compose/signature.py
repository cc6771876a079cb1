"""What a composed graph assumes about its inputs (the planned signature) and how a report
names one: shape, dtype, device, strides and 16-byte alignment of every tensor."""
from __future__ import annotations

from typing import Any, Sequence

import torch


def _first_line(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]


def _root_reason(error: BaseException) -> str:
    """The first line of `error` and, where it wraps another error (torch.compile's
    BackendCompilerFailed says only "backend='inductor' raised:" on its first line), the first
    line of the innermost cause: the reason a user can act on."""
    inner = error
    seen = {id(inner)}
    while (inner.__cause__ or inner.__context__) is not None and id(inner.__cause__ or inner.__context__) not in seen:
        inner = inner.__cause__ or inner.__context__
        seen.add(id(inner))
    outer = _first_line(error)
    if inner is error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        if outer.rstrip().endswith(":") and len(lines) > 1:
            return f"{outer} {lines[1]}"
        return outer
    return f"{outer} {_first_line(inner)}"



def _signature(args: Sequence[Any], device_free: frozenset = frozenset()) -> tuple:
    """What the composed graph assumes about its inputs: shape, dtype, device, strides and
    16-byte alignment of every tensor; the value of everything else. The inputs at the
    positions in `device_free` (0-dim tensors only PyTorch's own ops read) may be on any device:
    their device is left out."""
    parts = []
    for index, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            free = index in device_free
            parts.append(("tensor", tuple(arg.shape), arg.dtype, None if free else arg.device,
                          arg.stride(), True if free else _aligned(arg)))
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
            words.append(f"{part[2]}{list(part[1])}@{part[3] or 'any device'} strides {part[4]}"
                         + ("" if part[5] else " unaligned"))
        else:
            words.append(part[1])
    return "(" + ", ".join(words) + ")"

