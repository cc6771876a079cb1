"""Derived operands (docs/plan.md, "Derived operands"): kernel operands the engine asks to be
computed once, when the plan is applied, from module parameters, buffers or constants (packed
or folded weights). The plan holds each as a small program over a fixed vocabulary of tensor
ops (include/fact/problem/operand_transform.hpp); this module runs it with torch ops. Nothing
here knows why an operand is derived: the engine decided, the plan says how.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from fact.ops import parse_dtype


class TransformError(ValueError):
    """A derived operand whose program cannot run, or whose result is not what it declares."""


def _reshape(args, attrs):
    return args[0].reshape([int(v) for v in attrs["shape"]])


def _permute(args, attrs):
    return args[0].permute([int(v) for v in attrs["dims"]])


def _slice(args, attrs):
    start, end = int(attrs["start"]), int(attrs["end"])
    return args[0].narrow(int(attrs["dim"]), start, end - start)


def _pad(args, attrs):
    x, dim, size = args[0], int(attrs["dim"]), int(attrs["size"])
    dim = dim % x.dim()
    extra = size - x.shape[dim]
    if extra < 0:
        raise TransformError(f"pad of a dim of size {x.shape[dim]} to {size}")
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _repeat(args, attrs):
    return args[0].repeat([int(v) for v in attrs["repeats"]])


def _stack(args, attrs):
    return torch.stack(list(args), dim=int(attrs["dim"]))


def _cat(args, attrs):
    return torch.cat(list(args), dim=int(attrs["dim"]))


def _mul(args, attrs):
    a, b = args
    if a.dtype != b.dtype:
        raise TransformError(f"mul of {a.dtype} and {b.dtype}")
    return a * b


def _add_scalar(args, attrs):
    return args[0] + float(attrs["value"])


def _to(args, attrs):
    return args[0].to(parse_dtype(attrs["dtype"]))


OPS: dict[str, Callable[[Sequence[torch.Tensor], dict], torch.Tensor]] = {
    "reshape": _reshape, "permute": _permute, "slice": _slice, "pad": _pad, "repeat": _repeat,
    "stack": _stack, "cat": _cat, "mul": _mul, "add_scalar": _add_scalar, "to": _to,
}


def check(derived: dict) -> None:
    """Raises TransformError when a derived operand's description is malformed (unknown ops,
    references to nothing, no declared dtype / shape); runs nothing."""
    value = derived.get("value", "?")
    ops = derived.get("ops")
    if not isinstance(ops, list) or not ops:
        raise TransformError(f"derived value {value}: no ops")
    sources = derived.get("from")
    if not isinstance(sources, list):
        raise TransformError(f"derived value {value}: no sources")
    for index, op in enumerate(ops):
        if op.get("op") not in OPS:
            raise TransformError(f"derived value {value}, op {index}: unknown op '{op.get('op')}'")
        for ref in op.get("args", []):
            kind, number = str(ref)[:1], str(ref)[1:]
            limit = len(sources) if kind == "$" else index if kind == "%" else -1
            if not number.isdigit() or not 0 <= int(number) < limit:
                raise TransformError(f"derived value {value}, op {index}: reference '{ref}' names "
                                     f"nothing before it")
    try:
        parse_dtype(derived.get("dtype", ""))
        [int(v) for v in derived.get("shape", [])]
    except (ValueError, TypeError) as error:
        raise TransformError(f"derived value {value}: {error}") from None


def evaluate(derived: dict, sources: Sequence[torch.Tensor]) -> torch.Tensor:
    """The derived operand computed from its sources (in `from` order), contiguous, checked
    against the dtype and shape it declares. No autograd."""
    check(derived)
    value = derived.get("value", "?")
    if len(sources) != len(derived["from"]):
        raise TransformError(f"derived value {value}: {len(sources)} sources given, the program "
                             f"reads {len(derived['from'])}")
    results: list[torch.Tensor] = []
    with torch.no_grad():
        for index, op in enumerate(derived["ops"]):
            args = [sources[int(ref[1:])] if ref[0] == "$" else results[int(ref[1:])]
                    for ref in op.get("args", [])]
            try:
                results.append(OPS[op["op"]](args, op.get("attrs", {}) or {}))
            except TransformError:
                raise
            except Exception as error:  # noqa: BLE001 - a torch error names the op
                raise TransformError(f"derived value {value}, op {index} ({op['op']}): "
                                     f"{type(error).__name__}: {error}") from None
        out = results[-1].detach().contiguous()
    dtype = parse_dtype(derived["dtype"])
    shape = [int(v) for v in derived["shape"]]
    if out.dtype != dtype or list(out.shape) != shape:
        raise TransformError(f"derived value {value}: the program made {out.dtype} "
                             f"{list(out.shape)}, the plan declares {dtype} {shape}")
    return out


def versions(tensors: Sequence[Any]) -> tuple:
    """What identifies the sources' current contents: (data pointer, version counter) of each."""
    return tuple((t.data_ptr(), t._version) if isinstance(t, torch.Tensor) else (id(t), 0)
                 for t in tensors)
