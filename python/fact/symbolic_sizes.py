"""Sizes of a plan over declared symbols (docs/dynamic_shapes.md): a plan size is a plain
integer or `{"expr": ..., "poly": [[coefficient, [exponent per plan symbol]], ...]}`. Executors
evaluate the polynomial only; the expression is for readers.

    Poly                       a polynomial over the plan's symbols (evaluates ints and SymInts)
    parse_size(entry, count)   an int or a Poly from a plan entry (ValueError when malformed)
    evaluate(size, sizes)      the size at the symbols' values `sizes` (ints or SymInts)
    BucketTable                the symbols' bucket edges; index(sizes) -> the bucket tuple's row
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Sequence, Union


@dataclass(frozen=True)
class Poly:
    """sum(coefficient * prod(symbol_i ** exponent_i)) over `terms` ((coefficient, exponents))."""
    terms: tuple
    expr: str = ""

    def value(self, sizes: Sequence[Any]) -> Any:
        """The polynomial at `sizes` (plan symbol order): an int for ints, a SymInt for SymInts."""
        total: Any = 0
        for coefficient, exponents in self.terms:
            term: Any = coefficient
            for size, exponent in zip(sizes, exponents):
                for _ in range(exponent):
                    term = term * size
            total = total + term
        return total

    def constant(self) -> int | None:
        """The value when no symbol appears (else None)."""
        if all(not any(exponents) for _, exponents in self.terms):
            return sum(coefficient for coefficient, _ in self.terms)
        return None


Size = Union[int, Poly]


def parse_size(entry: Any, symbol_count: int, what: str = "size") -> Size:
    """A plan size: an integer, or {"poly": [[c, [e_0, ..., e_{n-1}]], ...], "expr": ...} with
    one exponent per plan symbol. ValueError naming `what` when malformed."""
    if isinstance(entry, bool):
        raise ValueError(f"{what}: {entry!r} is not a size")
    if isinstance(entry, int):
        return entry
    if isinstance(entry, float) and entry.is_integer():
        return int(entry)
    if not isinstance(entry, dict) or not isinstance(entry.get("poly"), list):
        raise ValueError(f"{what}: {entry!r} is neither an integer nor an {{\"expr\", \"poly\"}} object")
    terms = []
    for term in entry["poly"]:
        if (not isinstance(term, (list, tuple)) or len(term) != 2 or not isinstance(term[0], int)
                or not isinstance(term[1], (list, tuple))):
            raise ValueError(f"{what}: poly term {term!r} is not [coefficient, [exponents]]")
        exponents = tuple(term[1])
        if len(exponents) != symbol_count:
            raise ValueError(f"{what}: poly term {term!r} has {len(exponents)} exponents, the plan "
                             f"has {symbol_count} symbols")
        if any(not isinstance(e, int) or e < 0 for e in exponents):
            raise ValueError(f"{what}: poly term {term!r} has an exponent that is not a "
                             f"non-negative integer")
        terms.append((int(term[0]), exponents))
    return Poly(tuple(terms), str(entry.get("expr", "")))


def evaluate(size: Size, sizes: Sequence[Any]) -> Any:
    """`size` at the symbols' values `sizes` (plan order)."""
    return size.value(sizes) if isinstance(size, Poly) else size


def is_symbolic(size: Any) -> bool:
    return isinstance(size, Poly)


@dataclass(frozen=True)
class BucketTable:
    """Each symbol's ascending bucket edges (plan "symbols"[i]["edges"]); a size v falls into
    the first bucket whose edge is >= v, and bucket tuples are numbered row-major over the
    symbols (the last symbol varies fastest), as the plan's "buckets" lists them."""
    names: tuple
    edges: tuple      # tuple of tuples of ints

    @classmethod
    def from_symbols(cls, symbols: Sequence[dict]) -> "BucketTable":
        names, edges = [], []
        for index, symbol in enumerate(symbols):
            name = str(symbol.get("name", f"symbol {index}"))
            values = [int(v) for v in symbol.get("edges") or [symbol.get("max")]]
            if any(b <= a for a, b in zip(values, values[1:])):
                raise ValueError(f"symbol {name}: edges {values} are not ascending")
            names.append(name)
            edges.append(tuple(values))
        return cls(tuple(names), tuple(edges))

    @property
    def count(self) -> int:
        total = 1
        for values in self.edges:
            total *= len(values)
        return total

    def index(self, sizes: Sequence[int]) -> int:
        """The row-major bucket number of `sizes`; ValueError past a symbol's last edge."""
        if len(sizes) != len(self.edges):
            raise ValueError(f"{len(sizes)} sizes for {len(self.edges)} symbols "
                             f"({', '.join(self.names)})")
        row = 0
        for name, values, size in zip(self.names, self.edges, sizes):
            position = bisect.bisect_left(values, int(size))
            if position == len(values):
                raise ValueError(f"{name}={int(size)} is above its range (largest edge {values[-1]})")
            row = row * len(values) + position
        return row

    def edge_tuples(self) -> list[tuple]:
        """Every bucket's edge tuple, in bucket order."""
        tuples: list[tuple] = [()]
        for values in self.edges:
            tuples = [t + (v,) for t in tuples for v in values]
        return tuples
