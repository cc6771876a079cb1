"""Where a call's GPU time goes: its CUDA kernels under torch.profiler, per call, grouped by
who wrote them. Used by the benchmarks (the blocks bench's --profile, the training bench's
per-step profile); never by the engine's decisions.

    kernel_profile(fn, device, runs=3, top=12, grad=False) -> dict
        runs + 1 calls of `fn()` (the first a warm-up, outside the profile); each kernel's (and
        copy's) device time per call, the `top` largest, the rest summed, and `by_source`: the
        same time split by `kernel_source` (FACT's kernels, the vendor GEMM and attention
        libraries, Triton (Inductor), the optimizer's fused kernels, the rest). Device time,
        not wall time: gaps between kernels show as total_ms below a measured median.
        grad=False runs the calls under torch.no_grad() (a forward); True leaves grad mode as
        it is (a training step).

    kernel_source(name) -> str
        "fact" | "vendor_gemm" | "vendor_attention" | "triton" | "optimizer" | "other".
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

PROFILE_RUNS = 3

# Substrings of kernel names, checked in this order (lower case): FACT's kernels live in
# namespaces named after their entry symbols (`fact_...`, `fact::attention`), so "fact" first.
_SOURCES = (
    ("fact", ("fact",)),
    ("vendor_attention", ("flash", "fmha", "cudnn", "attention", "sdpa")),
    ("vendor_gemm", ("nvjet", "gemm", "xmma", "cutlass", "cublas", "sm90_", "sm80_")),
    ("optimizer", ("multi_tensor_apply", "adam", "foreach")),
    ("triton", ("triton",)),
)


def kernel_source(name: str) -> str:
    """Who wrote a CUDA kernel, from its (demangled) name."""
    lowered = name.lower()
    for source, needles in _SOURCES:
        if any(needle in lowered for needle in needles):
            return source
    return "other"


def kernel_profile(fn: Callable[[], object], device: torch.device, runs: int = PROFILE_RUNS,
                   top: int = 12, grad: bool = False) -> dict:
    from torch.profiler import ProfilerActivity, profile

    mode = contextlib.nullcontext() if grad else torch.no_grad()
    with mode:
        fn()
        torch.cuda.synchronize(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(runs):
                fn()
            torch.cuda.synchronize(device)
    kernels: dict[str, list[float]] = {}
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        entry = kernels.setdefault(event.name, [0.0, 0])
        entry[0] += event.device_time_total / 1000.0 / runs  # us -> ms, per call
        entry[1] += 1
    rows = sorted(({"kernel": name[:160], "source": kernel_source(name), "ms": round(ms, 4),
                    "calls": round(count / runs, 2)} for name, (ms, count) in kernels.items()),
                  key=lambda r: -r["ms"])
    by_source: dict[str, float] = {}
    for name, (ms, _) in kernels.items():
        source = kernel_source(name)
        by_source[source] = by_source.get(source, 0.0) + ms
    rest = sum(r["ms"] for r in rows[top:])
    return {"runs": runs, "total_ms": round(sum(r["ms"] for r in rows), 4),
            "by_source": {k: round(v, 4) for k, v in sorted(by_source.items(), key=lambda kv: -kv[1])},
            "kernels": rows[:top], "other_ms": round(rest, 4), "other_kernels": max(0, len(rows) - top)}
