"""The guard of a module planned over declared ranges (docs/dynamic_shapes.md, "Guard"): a
call runs the composed graph when every tensor input has the plan's rank, dtype and device, its
static dimensions equal the plan's, its symbolic dimensions are inside their range and a
multiple of their `multiple`, the same symbol has the same size everywhere it binds, and the
layout is the one the graph was planned for (contiguous when the example was; 16-byte aligned
on CUDA). `RangeGuard.check(args)` returns the symbols' sizes, or why not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from fact.ops import parse_dtype
from fact.symbolic_sizes import Poly, evaluate, parse_size


@dataclass(frozen=True)
class Symbol:
    name: str
    min: int
    max: int
    multiple: int = 1

    def allows(self, size: int) -> bool:
        return self.min <= size <= self.max and size % self.multiple == 0

    def describe(self) -> str:
        return f"{self.name} in {self.min}..{self.max}" + (f" (multiple of {self.multiple})"
                                                          if self.multiple > 1 else "")


@dataclass(frozen=True)
class _TensorRule:
    dtype: torch.dtype
    device: torch.device
    shape: tuple          # int or Poly per dim
    contiguous: bool      # the example was contiguous: so must every call's tensor be


def _binding(size: Any) -> int | None:
    """The symbol a dimension binds: its poly is exactly one symbol (coefficient 1)."""
    if isinstance(size, Poly) and len(size.terms) == 1:
        coefficient, exponents = size.terms[0]
        if coefficient == 1 and sum(exponents) == 1:
            return list(exponents).index(1)
    return None


class RangeGuard:
    """Checks a call's arguments against a plan's symbolic inputs (see the module docstring)."""

    def __init__(self, symbols: Sequence[dict], inputs: Sequence[dict], example_inputs: Sequence[Any]):
        self.symbols = tuple(Symbol(str(s["name"]), int(s["min"]), int(s["max"]), int(s.get("multiple", 1) or 1))
                             for s in symbols)
        count = len(self.symbols)
        rules: list = []
        for index, (entry, example) in enumerate(zip(inputs, example_inputs)):
            if "shape" not in entry:
                rules.append(("value", entry.get("value")))
                continue
            shape = tuple(parse_size(v, count, f"input {index} dim {d}") for d, v in enumerate(entry["shape"]))
            device = example.device if isinstance(example, torch.Tensor) else torch.device("cpu")
            contiguous = bool(example.is_contiguous()) if isinstance(example, torch.Tensor) else True
            rules.append(_TensorRule(parse_dtype(entry.get("dtype", "")), device, shape, contiguous))
        if len(rules) != len(example_inputs):
            raise ValueError(f"the plan has {len(rules)} inputs, the module is called with {len(example_inputs)}")
        self.rules = tuple(rules)
        # inputs that may arrive on any device (ComposedModule.allow_any_device)
        self.device_free: frozenset = frozenset()
        self.bindings = tuple((i, d, symbol) for i, rule in enumerate(rules) if isinstance(rule, _TensorRule)
                              for d, size in enumerate(rule.shape) if (symbol := _binding(size)) is not None)
        bound = {symbol for _, _, symbol in self.bindings}
        unbound = [s.name for i, s in enumerate(self.symbols) if i not in bound]
        if unbound:
            raise ValueError(f"no input dimension binds {', '.join(unbound)}")
        # The fast path's tables: each distinct polynomial once; per tensor input its shape as
        # a tuple of ints (static) or of ints and polynomial numbers (-1 - k: polynomial k).
        polys: dict = {}
        self._shapes = tuple(
            None if not isinstance(rule, _TensorRule) else tuple(
                size if not isinstance(size, Poly) else -1 - polys.setdefault(size.terms, len(polys))
                for size in rule.shape)
            for rule in rules)
        self._static = tuple(shape is not None and all(size >= 0 for size in shape) for shape in self._shapes)
        self._polys = tuple(Poly(terms) for terms in polys)

    def check(self, args: Sequence[Any]) -> tuple[tuple | None, str]:
        """(the symbols' sizes, "") when the call fits; (None, why) otherwise."""
        sizes = self._fits(args) if len(args) == len(self.rules) else None
        if sizes is not None:
            return sizes, ""
        return self._why_not(args)

    def _fits(self, args: Sequence[Any]) -> tuple | None:
        """The symbols' sizes when the call fits, else None (then _why_not says why): the same
        rules as _why_not, checked on every call with fewer Python steps (the guard runs on each
        call of a composed training graph, over every parameter)."""
        sizes: list = [None] * len(self.symbols)
        for index, dim, symbol in self.bindings:
            arg = args[index]
            if not isinstance(arg, torch.Tensor) or arg.dim() <= dim:
                return None
            size = arg.shape[dim]
            if sizes[symbol] is None:
                sizes[symbol] = size
            elif sizes[symbol] != size:
                return None
        for symbol, size in zip(self.symbols, sizes):
            if size is None or not symbol.allows(size):
                return None
        values = [poly.value(sizes) for poly in self._polys]
        for index, (rule, arg, shape, static) in enumerate(zip(self.rules, args, self._shapes, self._static)):
            if shape is None:
                if isinstance(arg, torch.Tensor) or repr(arg) != rule[1]:
                    return None
                continue
            if not isinstance(arg, torch.Tensor) or arg.dtype != rule.dtype:
                return None
            if static:
                if arg.shape != shape:
                    return None
            elif len(arg.shape) != len(shape) or any(
                    size != (want if want >= 0 else values[-1 - want]) for size, want in zip(arg.shape, shape)):
                return None
            device = arg.device
            if device != rule.device and index not in self.device_free:
                return None
            if rule.contiguous and not arg.is_contiguous():
                return None
            if device.type == "cuda" and arg.data_ptr() % 16:
                return None
        return tuple(sizes)

    def _why_not(self, args: Sequence[Any]) -> tuple[tuple | None, str]:
        """check's answer, rule by rule, with the reason of the first rule a call breaks."""
        if len(args) != len(self.rules):
            return None, f"{len(args)} inputs, the plan has {len(self.rules)}"
        sizes: list = [None] * len(self.symbols)
        for index, dim, symbol in self.bindings:
            arg = args[index]
            if not isinstance(arg, torch.Tensor) or arg.dim() <= dim:
                continue  # reported below
            size = int(arg.shape[dim])
            if sizes[symbol] is None:
                sizes[symbol] = size
            elif sizes[symbol] != size:
                return None, (f"{self.symbols[symbol].name} is {sizes[symbol]} and {size} "
                              f"(input {index} dim {dim})")
        for symbol, size in zip(self.symbols, sizes):
            if size is None:
                where = next(f"input {i} dim {d}" for i, d, k in self.bindings if self.symbols[k] is symbol)
                return None, f"{symbol.name} ({where}) is not given: that input is missing or of lower rank"
            if not symbol.allows(size):
                return None, f"{symbol.name}={size} is outside {symbol.describe()}"
        for index, (rule, arg) in enumerate(zip(self.rules, args)):
            if not isinstance(rule, _TensorRule):
                if isinstance(arg, torch.Tensor) or repr(arg) != rule[1]:
                    return None, f"input {index} is {_what(arg)}, the plan has {rule[1]}"
                continue
            if not isinstance(arg, torch.Tensor):
                return None, f"input {index} is {_what(arg)}, not a tensor"
            if arg.dim() != len(rule.shape):
                return None, f"input {index} has rank {arg.dim()}, the plan {len(rule.shape)}"
            if arg.dtype != rule.dtype:
                return None, f"input {index} is {arg.dtype}, the plan {rule.dtype}"
            if arg.device != rule.device and index not in self.device_free:
                return None, f"input {index} is on {arg.device}, the plan on {rule.device}"
            for dim, want in enumerate(rule.shape):
                if int(arg.shape[dim]) != evaluate(want, sizes):
                    return None, (f"input {index} dim {dim} is {int(arg.shape[dim])}, the plan "
                                  f"{want.expr or want if isinstance(want, Poly) else want}"
                                  + (f" = {evaluate(want, sizes)}" if isinstance(want, Poly) else ""))
            if rule.contiguous and not arg.is_contiguous():
                return None, f"input {index} is not contiguous (strides {list(arg.stride())})"
            if arg.device.type == "cuda" and arg.data_ptr() % 16:
                return None, f"input {index} is not 16-byte aligned"
        return tuple(sizes), ""


def _what(arg: Any) -> str:
    if isinstance(arg, torch.Tensor):
        return f"a {arg.dtype} tensor {list(arg.shape)}"
    return repr(arg)
