#!/usr/bin/env python3
"""Fit the coefficients of the fast erf-GELU device functor (patterns/gemm/epilogue/gelu_erf_fast.h).

The functor computes, for t = min(|x|, T):
    Q(t) = Phi(-t) = S(u) * 2^(-c * t^2),   u = 1 / (1 + p * t),
    gelu(x) = max(x, -0) - t * Q(t)
with S a polynomial of degree N in u, c = log2(e)/2 rounded to float32 (the device computes the
exponent in float32 and ex2.approx evaluates the power). S is fitted for minimax RELATIVE error of
Q over t in [0, T] (so that the negative tail, where gelu is x * Q, is relatively accurate too),
by a linear program on a dense Chebyshev grid in u; p is chosen by a scan and a bounded search.
The fit runs in float64 against scipy's erfcx (Phi(-t) e^{t^2/2} = erfcx(t / sqrt 2) / 2); p and the
coefficients are then rounded to float32 (p first, the coefficients refitted for it) and the
error of the rounded polynomial is reported.

Usage: python fit_gelu_erf_fast.py [--degree 7]   (needs numpy and scipy; prints the header's
C++ constants, the kS* negated: the header evaluates -S)
T = 13.25: beyond it 2^(-c t^2) < 2^-126, which ex2.approx.ftz flushes to zero.
"""
import argparse

import numpy as np
from scipy.optimize import linprog, minimize_scalar
from scipy.special import erfcx

T_MAX = 13.25
C_EXP = float(np.float32(np.log2(np.e) / 2.0))  # the float32 constant the device multiplies by


def target(t):
    """Phi(-t) * 2^(c t^2): what S(u) must equal (c the float32 constant, so its rounding is fitted)."""
    # Phi(-t) = erfcx(t/sqrt2)/2 * e^{-t^2/2};  times 2^{c t^2} = e^{c ln2 t^2}
    return 0.5 * erfcx(t / np.sqrt(2.0)) * np.exp((C_EXP * np.log(2.0) - 0.5) * t * t)


def grid(p, points):
    u_min = 1.0 / (1.0 + p * T_MAX)
    k = np.arange(points)
    u = 0.5 * (u_min + 1.0) + 0.5 * (1.0 - u_min) * np.cos(np.pi * (k + 0.5) / points)
    u = np.concatenate([u, [u_min, 1.0]])
    t = (1.0 / u - 1.0) / p
    return u, t


def fit(p, degree, points=3000):
    """Minimax relative-error coefficients (increasing powers) of S for this p, and that error."""
    u, t = grid(p, points)
    f = target(t)
    a = np.vander(u, degree + 1, increasing=True) / f[:, None]
    n = degree + 1
    ones = np.ones((len(u), 1))
    a_ub = np.vstack([np.hstack([a, -ones]), np.hstack([-a, -ones])])
    b_ub = np.concatenate([np.ones(len(u)), -np.ones(len(u))])
    cost = np.zeros(n + 1)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(None, None)] * (n + 1), method="highs")
    if not res.success:
        raise RuntimeError(res.message)
    return res.x[:n], res.x[-1]


def max_relative_error(p, coefficients, points=200000):
    u, t = grid(p, points)
    s = np.polynomial.polynomial.polyval(u, coefficients)
    return np.max(np.abs(s / target(t) - 1.0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--degree", type=int, default=7)
    args = parser.parse_args()
    n = args.degree

    scan = min((fit(p, n, 600)[1], p) for p in np.linspace(0.15, 1.2, 43))
    best = minimize_scalar(lambda p: fit(p, n, 800)[1], bounds=(scan[1] - 0.03, scan[1] + 0.03),
                           method="bounded", options={"xatol": 1e-6})
    p32 = float(np.float32(best.x))
    coefficients, error = fit(p32, n)
    c32 = np.array([float(np.float32(c)) for c in coefficients])
    rounded_error = max_relative_error(p32, c32)

    print(f"// degree {n}: minimax relative error of Q {error:.3e} (float64 coefficients), "
          f"{rounded_error:.3e} with float32 coefficients")
    print(f"constexpr float kP = {p32!r:}f;  // {np.float32(p32).view(np.uint32):#010x}")
    print(f"constexpr float kExp2Scale = {C_EXP!r}f;  // log2(e) / 2")
    print(f"constexpr float kTMax = {T_MAX!r}f;")
    # The header keeps -S (its caller adds t * (-Q) to max(x, -0) with one FMA, no negation).
    for i, c in enumerate(c32):
        print(f"constexpr float kS{i} = {float(np.float32(-c))!r:}f;  // {np.float32(-c).view(np.uint32):#010x}")


if __name__ == "__main__":
    main()
