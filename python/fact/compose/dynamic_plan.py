"""A plan over declared symbols (docs/dynamic_shapes.md) tied to the dynamically exported
program: which placeholder dimension gives each symbol's size, the program's sympy symbols in
the plan's order, the assignments a replacement is verified at, and the module inputs at an
assignment.

    SymbolBinding(doc, guard, graph_module)
        .sizes_from_graph(graph)      aten.sym_size.int nodes, one per plan symbol (inserted once)
        .concrete(x, sizes)           an int or SymInt of the program at the symbols' sizes
        .same(meta_value, plan_size)  whether a program size equals a plan size (int or Poly)
                                      at several assignments
        .assignments(on_gpu)          [(label, sizes)]: hint, all-min, not a multiple of 8, all-max
        .inputs_at(sizes, examples, seed)  fresh module inputs at those sizes
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx

from fact.compose.range_guard import RangeGuard
from fact.symbolic_sizes import evaluate


class SymbolBinding:
    """See the module docstring. `guard` binds each plan symbol to (input index, dim)."""

    def __init__(self, doc: dict, guard: RangeGuard, graph_module: torch.fx.GraphModule):
        self.symbols = list(doc.get("symbols") or [])
        self.names = [str(s["name"]) for s in self.symbols]
        self.guard = guard
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
        user = placeholders[-len(guard.rules):] if guard.rules else []
        self.sources: list[tuple] = []   # per symbol: (placeholder node, dim)
        self.sympy: list = []            # per symbol: the program's sympy symbol
        for index, name in enumerate(self.names):
            input_index, dim = next((i, d) for i, d, s in guard.bindings if s == index)
            node = user[input_index]
            size = node.meta["val"].shape[dim]
            if not isinstance(size, torch.SymInt) or not size.node.expr.is_Symbol:
                raise ValueError(f"{name} (input {input_index} dim {dim}) is not a free size in the "
                                 f"exported program ({size})")
            self.sources.append((node, dim))
            self.sympy.append(size.node.expr)
        self._size_nodes: list | None = None

    def sizes_from_graph(self, graph: torch.fx.Graph) -> list:
        """aten.sym_size.int of the placeholder dimension each symbol binds, inserted after the
        last placeholder (once per graph): the `sizes` every fact::launch call passes."""
        if self._size_nodes is None:
            last = [n for n in graph.nodes if n.op == "placeholder"][-1]
            made = []
            for node, dim in self.sources:
                with graph.inserting_after(last):
                    size = graph.call_function(torch.ops.aten.sym_size.int, (node, dim))
                size.meta["val"] = node.meta["val"].shape[dim]
                made.append(size)
                last = size
            self._size_nodes = made
        return self._size_nodes

    def concrete(self, value: Any, sizes: Sequence[int]) -> int:
        """`value` (an int or a SymInt of the program) at the symbols' sizes."""
        if isinstance(value, torch.SymInt):
            expr = value.node.expr.subs(dict(zip(self.sympy, sizes)))
            if expr.free_symbols:
                raise ValueError(f"size {value.node.expr} depends on sizes the plan does not declare")
            return int(expr)
        return int(value)

    def check_points(self) -> list[tuple]:
        """A few assignments for symbolic comparisons: hint, all-min, all-max, and mixed."""
        low = tuple(int(s["min"]) for s in self.symbols)
        high = tuple(int(s["max"]) for s in self.symbols)
        hint = tuple(int(s.get("hint", s["min"])) for s in self.symbols)
        mixed = tuple(h if i % 2 else l for i, (l, h) in enumerate(zip(low, high)))
        return list(dict.fromkeys([hint, low, high, mixed]))

    def same(self, value: Any, planned: Any) -> bool:
        """Whether a program size (int / SymInt) equals a plan size (int / Poly) at check_points."""
        return all(self.concrete(value, point) == evaluate(planned, point) for point in self.check_points())

    @property
    def hint(self) -> tuple:
        """The symbols' hint sizes (the example inputs' sizes)."""
        return tuple(int(s.get("hint", s["min"])) for s in self.symbols)

    def assignments(self, on_gpu: bool) -> list[tuple[str, tuple]]:
        """Where each replacement is verified: the hint, every symbol at its minimum, sizes that
        are not multiples of 8 where the multiples allow, and on a GPU every symbol at its
        maximum (docs/dynamic_shapes.md, "Verification")."""
        points: list[tuple[str, tuple]] = []
        hint = tuple(int(s.get("hint", s["min"])) for s in self.symbols)
        points.append(("hint", hint))
        points.append(("all at their minimum", tuple(_round_up(int(s["min"]), _multiple(s)) for s in self.symbols)))
        odd = tuple(_not_multiple_of_8(s, h) for s, h in zip(self.symbols, hint))
        if odd != hint:
            points.append(("not a multiple of 8", odd))
        if on_gpu:
            points.append(("all at their maximum", tuple(int(s["max"]) // _multiple(s) * _multiple(s)
                                                         for s in self.symbols)))
        seen, unique = set(), []
        for label, sizes in points:
            if sizes not in seen:
                seen.add(sizes)
                unique.append((label, sizes))
        return unique

    def describe(self, sizes: Sequence[int]) -> str:
        return ", ".join(f"{name}={size}" for name, size in zip(self.names, sizes))

    def inputs_at(self, sizes: Sequence[int], example_inputs: Sequence[Any], seed: int) -> tuple:
        """Module inputs at the symbols' sizes: each tensor input's planned shape evaluated there,
        in the example's dimension order (its strides' order), fresh normal values for floating
        inputs (seeded), integers and booleans drawn from the example's value range."""
        generator = torch.Generator().manual_seed(seed)
        made = []
        for rule, example in zip(self.guard.rules, example_inputs):
            if not isinstance(example, torch.Tensor):
                made.append(example)
                continue
            shape = [evaluate(v, sizes) for v in rule.shape]
            # the example's dimension order (a transposed weight saved for a backward graph)
            order = sorted(range(example.dim()), key=lambda d: -example.stride(d)) \
                if example.dim() and not example.is_contiguous() else list(range(example.dim()))
            stored = [shape[d] for d in order]
            if example.is_floating_point():
                value = torch.randn(stored, generator=generator, dtype=torch.float32).to(example.dtype)
            elif example.dtype == torch.bool:
                value = torch.rand(stored, generator=generator) < 0.5
            else:
                low = int(example.min()) if example.numel() else 0
                high = int(example.max()) if example.numel() else 1
                value = torch.randint(low, high + 1, stored, generator=generator).to(example.dtype)
            if order != sorted(order):   # a tensor of its own (not a view: dynamo guards on views)
                value = value.permute([order.index(d) for d in range(len(order))])
                value = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).copy_(value)
            made.append(value.to(example.device))
        return tuple(made)


def _multiple(symbol: dict) -> int:
    return int(symbol.get("multiple", 1) or 1)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _not_multiple_of_8(symbol: dict, hint: int) -> int:
    """A size in the symbol's range, a multiple of its `multiple` but not of 8, nearest the
    hint (the hint itself when no such size exists)."""
    multiple, low, high = _multiple(symbol), int(symbol["min"]), int(symbol["max"])
    if multiple % 8 == 0:
        return hint
    start = _round_up(hint, multiple)
    for step in range(0, 9):  # within 8 multiples of the hint one is not a multiple of 8
        for value in (start - step * multiple, start + step * multiple):
            if low <= value <= high and value % 8:
                return value
    return hint

