"""Where a call's GPU time goes: its CUDA kernels under torch.profiler, per call, grouped by
who wrote them. Used by the benchmarks (the blocks bench's --profile, the training bench's
per-step profile); never by the engine's decisions.

    kernel_profile(fn, device, runs=3, top=12, grad=False) -> dict
        runs + 1 calls of `fn()` (the first a warm-up, outside the profile); each kernel's (and
        copy's) device time per call, the `top` largest, the rest summed, and `by_source`: the
        same time split by `kernel_source` (FACT's kernels, the vendor GEMM, attention and
        convolution libraries, Triton (Inductor), the optimizer's fused kernels, the rest). Device time,
        not wall time: gaps between kernels show as total_ms below a measured median.
        grad=False runs the calls under torch.no_grad() (a forward); True leaves grad mode as
        it is (a training step).

    kernel_source(name) -> str
        "fact" | "vendor_gemm" | "vendor_attention" | "vendor_conv" | "triton" | "optimizer" | "other".

    host_profile(fn, runs=3, top=15, grad=False) -> dict
        Where a call's host time goes: runs + 1 calls of `fn()` (the first a warm-up) under
        torch.profiler's CPU activity; the wall time per call and the `top` operators and
        Python-visible functions by their own host time per call (self time: a call's time
        minus its children's). On a host-bound step the rows say what holds the host.
"""
from __future__ import annotations

import contextlib
import re
from typing import Callable

import torch

PROFILE_RUNS = 3

# FACT's kernels: its own (`fact::attention::...`, `fact::gemm::padding::...`) and the CUTLASS
# kernels its libraries instantiate. A CUTLASS kernel's demangled name is its template,
# `cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>` (3.x) or
# `cutlass::Kernel2<...>` (2.x, the strict float32 fallback): the entry's namespace is not in it.
# cuBLAS names its CUTLASS-built kernels (`cutlass3x_sm90_...`, `cutlass_80_...`) and PyTorch's
# own CUTLASS kernels sit in `at::` types, so neither reads as FACT's.
# The profiler reports some names mangled (`_ZN7cutlass13device_kernelI...`): both spellings.
_FACT_TEMPLATE = re.compile(r"cutlass::(device_kernel|kernel2?)<|_zn7cutlass(13device_kernel|6kernel|7kernel2)i")
_PYTORCH_TYPES = ("at::", "2at4cuda", "2at6native")
# cuBLAS's own CUTLASS kernels under the same templates, named by a plain identifier:
# `cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>` (float32 SGEMM).
_VENDOR_INSTANCE = re.compile(r"(kernel2?|device_kernel)<cutlass(3x)?_")
# Then substrings of the other kernels' names, checked in this order (lower case).
# Inductor's Triton kernels come first: their names carry the ops they fuse
# (`triton_poi_fused__scaled_dot_product_cudnn_attention_clone_...` is a copy, not attention).
# cuDNN's convolutions (a ViT's patch embedding) and their layout transposes are not attention,
# though their names say cudnn (and cuDNN's attention kernels say fprop).
_SOURCES = (
    ("triton", ("triton",)),
    ("vendor_attention", ("flash", "fmha", "attention", "sdpa")),
    ("vendor_conv", ("fprop", "dgrad", "wgrad", "nchwtonhwc", "nhwctonchw", "conv", "cudnn")),
    ("vendor_gemm", ("nvjet", "gemm", "xmma", "cutlass", "cublas", "sm90_", "sm80_")),
    ("optimizer", ("multi_tensor_apply", "adam", "foreach")),
)


def kernel_source(name: str) -> str:
    """Who wrote a CUDA kernel, from its (demangled) name."""
    lowered = name.lower()
    if "fact::" in lowered or "fact_" in lowered or (_FACT_TEMPLATE.search(lowered)
                                                          and not any(t in lowered for t in _PYTORCH_TYPES)
                                                          and not _VENDOR_INSTANCE.search(lowered)):
        return "fact"
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


def host_profile(fn: Callable[[], object], runs: int = PROFILE_RUNS, top: int = 15,
                 grad: bool = False) -> dict:
    import time

    from torch.profiler import ProfilerActivity, profile

    def synchronize() -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    mode = contextlib.nullcontext() if grad else torch.no_grad()
    with mode:
        fn()
        synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            started = time.perf_counter()
            for _ in range(runs):
                fn()
            synchronize()
            wall_ms = (time.perf_counter() - started) * 1e3 / runs
    rows = sorted(({"op": event.key[:160], "self_ms": event.self_cpu_time_total / 1000.0 / runs,
                    "calls": event.count / runs} for event in prof.key_averages()),
                  key=lambda r: -r["self_ms"])
    return {"runs": runs, "wall_ms": round(wall_ms, 4),
            "ops": [{**r, "self_ms": round(r["self_ms"], 4), "calls": round(r["calls"], 2)}
                    for r in rows[:top]],
            "other_ms": round(sum(r["self_ms"] for r in rows[top:]), 4)}
