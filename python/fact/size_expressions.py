"""Symbolic sizes of an exported program written as FACT size expressions
(docs/dynamic_shapes.md): integers, symbol names, `+`, `-`, `*`, `//` and parentheses.

    expression_of(expr, names) -> str   a sympy size expression over the program's symbols,
                                        spelled with the user's names (CaptureError otherwise)
    size_of(x, names) -> int | str      an int or SymInt size: the int, or its expression
"""
from __future__ import annotations

from typing import Any, Mapping

import sympy
import torch

from fact.capture_errors import CaptureError


def _floor_div_types() -> tuple:
    from torch.utils._sympy import functions
    return tuple(getattr(functions, name) for name in ("FloorDiv", "CleanDiv") if hasattr(functions, name))


def expression_of(expr: Any, names: Mapping[Any, str]) -> str:
    """`expr` (sympy) as a size expression over `names` (sympy symbol -> user name). Raises
    CaptureError naming the expression for anything outside the grammar (Mod, Max, a
    fraction, a symbol that is not a declared dimension, ...)."""
    floor_divs = _floor_div_types()

    def fail(part: Any) -> CaptureError:
        return CaptureError(f"size expression '{expr}' cannot be written for FACT: '{part}' is "
                            f"outside the grammar (integers, declared dimensions, + - * // and "
                            f"parentheses)")

    def atom(e: Any) -> str:
        text = write(e)
        return text if _is_atom(e) else f"({text})"

    def product(e: Any) -> str:
        coefficient, rest = e.as_coeff_Mul()
        if not coefficient.is_Integer:
            raise fail(e)
        factors = []
        for factor in sympy.Mul.make_args(rest):
            if factor == 1:
                continue
            if factor.is_Pow and factor.exp.is_Integer and int(factor.exp) >= 1:
                factors += [atom(factor.base)] * int(factor.exp)
            elif isinstance(factor, sympy.Add) or isinstance(factor, floor_divs):
                factors.append(f"({write(factor)})")
            else:
                factors.append(atom(factor))
        if int(coefficient) != 1 or not factors:
            factors.insert(0, str(int(coefficient)))
        return "*".join(factors)

    def write(e: Any) -> str:
        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            if e not in names:
                raise CaptureError(f"size expression '{expr}' uses '{e}', which is not a declared "
                                   f"dynamic dimension (declare it, or make the size static)")
            return names[e]
        if isinstance(e, floor_divs):
            base, divisor = e.args
            return f"{product(base) if not isinstance(base, sympy.Add) else '(' + write(base) + ')'}//{atom(divisor)}"
        if isinstance(e, sympy.Add):
            positive, negative = [], []
            for term in e.as_ordered_terms():
                coefficient, _ = term.as_coeff_Mul()
                (negative if coefficient.is_negative else positive).append(term)
            text = " + ".join(product(t) for t in positive) if positive else "0"
            for term in negative:
                text += f" - {product(-term)}"
            return text
        if isinstance(e, sympy.Mul) or e.is_Pow:
            coefficient, _ = e.as_coeff_Mul()
            if coefficient.is_negative:
                return f"0 - {product(-e)}"
            return product(e)
        if type(e).__name__ in ("Min", "Max"):
            chosen = _dominant_argument(e, type(e).__name__ == "Min")
            if chosen is not None:
                return write(chosen)
        raise fail(e)

    return write(sympy.sympify(expr))


# Sizes a Min/Max of sizes is compared at: every declared dimension is at least 1.
_DOMINANCE_POINTS = (1, 2, 3, 7, 64, 1000, 65536)


def _dominant_argument(e: Any, smallest: bool) -> Any:
    """The argument of a Min (smallest) or Max of sizes that is the smallest (largest) at every
    combination of _DOMINANCE_POINTS for its symbols, or None. torch writes strides of
    expanded or interleaved views as e.g. Min(16*seq, 32*seq), which is 16*seq for every size;
    a Min whose arguments cross inside the sizes is left unwritten (a capture error)."""
    import itertools

    symbols = sorted(e.free_symbols, key=str)
    points = list(itertools.islice(itertools.product(_DOMINANCE_POINTS, repeat=len(symbols)), 2401))
    for candidate in e.args:
        if all((candidate.subs(dict(zip(symbols, p))) <= other.subs(dict(zip(symbols, p)))) == smallest
               or candidate.subs(dict(zip(symbols, p))) == other.subs(dict(zip(symbols, p)))
               for other in e.args if other is not candidate for p in points):
            return candidate
    return None


def _is_atom(e: Any) -> bool:
    return bool(e.is_Symbol or (e.is_Integer and int(e) >= 0))


def size_of(x: Any, names: Mapping[Any, str]) -> int | str:
    """An int (or a SymInt whose value is fixed): the int; a SymInt over declared dimensions:
    its expression."""
    if isinstance(x, torch.SymInt):
        expr = _without_whole_remainders(x.node.expr, x.node.shape_env)
        if not expr.free_symbols:
            return int(expr)
        return expression_of(expr, names)
    return int(x)


def _without_whole_remainders(expr: Any, shape_env: Any) -> Any:
    """`expr` with each Mod(p, q) whose q is p times a factor of at least 2 over the sizes' ranges
    replaced by p (0 <= p < q: a backward graph's stride checks write Mod(s1, s0*s1) where the
    trace has s0 >= 2), and each Mod(p, p) by 0. Anything else is left as it is."""
    from torch.utils._sympy.functions import Mod as TorchMod

    def whole(mod: Any) -> Any:
        p, q = mod.args
        ratio = sympy.simplify(q / p)
        if ratio == 1:
            return sympy.Integer(0)
        if not ratio.free_symbols or not ratio.is_polynomial() or any(
                c < 0 for c in sympy.Poly(ratio, *sorted(ratio.free_symbols, key=str)).coeffs()):
            return mod
        try:
            lower = shape_env.bound_sympy(ratio).lower
        except Exception:  # noqa: BLE001 - no range known: leave it
            return mod
        return p if lower >= 2 else mod

    mods = [m for m in expr.atoms(sympy.Mod, TorchMod)] if expr.has(sympy.Mod, TorchMod) else []
    for mod in mods:
        expr = expr.xreplace({mod: whole(mod)})
    return expr
