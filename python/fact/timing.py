"""Timers shared by `fact.measure` and the composition benchmark (docs/architecture.md).

`time_cuda`: CUDA events around each run, after warm-up, with the L2 cache flushed before
every timed run (a write of `flush_mb` MiB, outside the events), so no run reads operands
left in L2 by the previous one. `time_cpu`: time.perf_counter around each run, for CPU tensors
(no flush). Both return `TimingStats`: the median and the spread of the runs.

`time_cuda_interleaved`: time_cuda of several functions in rounds (each once per round, the
order rotating), so that the GPU's clock drift during a measurement falls on all of them alike
(the conformance benchmark's FACT / eager / torch.compile comparison).

`cpu_time_per_call`: wall time of many back-to-back calls with one synchronize at the end, for
measuring the host-side (Python, dispatch, launch) cost of a forward when its GPU work is small.

`cuda_median_ms`: the quick timer of the never-slower checks (fact.compose, fact.replacement_speed):
median of CUDA events around each run after warm-up (`l2_flushed_medians_ms`: several functions
timed interleaved with the L2 flushed before each run, the whole-module check's timer). `capture_cuda_graph`: a function
warmed up on a side stream and captured into a CUDA graph (fact.compose's CUDA-graph runner, the
per-replacement speed check).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

Timer = Callable[[Callable[[], Any]], float]   # fn -> milliseconds (the never-slower checks' timers)
# The whole-module never-slower check's timer: candidates by name -> each one's milliseconds.
CandidatesTimer = Callable[[dict[str, Callable[[], Any]]], dict[str, float]]


@dataclass
class TimingStats:
    median_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    max_ms: float
    runs: int
    timer: str  # how it was measured, for the report

    def to_json(self) -> dict:
        return asdict(self)


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks; sorted_values must be non-empty."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(samples_ms: list[float], timer: str) -> TimingStats:
    if not samples_ms:
        raise ValueError("no timing samples")
    ordered = sorted(samples_ms)
    return TimingStats(median_ms=statistics.median(ordered), min_ms=ordered[0],
                       p10_ms=_quantile(ordered, 0.1), p90_ms=_quantile(ordered, 0.9),
                       max_ms=ordered[-1], runs=len(ordered), timer=timer)


class L2Flusher:
    """Overwrites a buffer larger than the L2 cache (on the current CUDA device)."""

    def __init__(self, megabytes: int, device: torch.device):
        self.megabytes = megabytes
        self.buffer = (torch.empty(megabytes * 1024 * 1024, dtype=torch.uint8, device=device)
                       if megabytes > 0 else None)

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


def time_cuda(fn: Callable[[], object], warmup: int, iters: int, flusher: L2Flusher) -> TimingStats:
    """Median and spread of `iters` runs of fn, each between two CUDA events on the current
    stream, L2 flushed before each (time_cuda_interleaved of fn alone)."""
    return time_cuda_interleaved({"fn": fn}, warmup, iters, flusher)["fn"]


def time_cuda_interleaved(fns: dict[str, Callable[[], object]], warmup: int, iters: int,
                          flusher: L2Flusher) -> dict[str, TimingStats]:
    """time_cuda of several functions at once, interleaved: `iters` rounds, each running every
    function once (L2 flushed before each, CUDA events around it), the order rotating from round
    to round. The GPU's clocks and temperature drift while a case is timed (a heavy GEMM
    throttles it); timed one after the other, the last one pays for that drift (in the
    2026-11-26 H200 conformance run, gemm_bmm bf16, whose FACT run was torch.compile of the
    original itself, read 0.86x that same compiled module timed just before it). Interleaved,
    every function sees the same conditions. Warm-up: `warmup` runs of each, in turn."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    torch.cuda.synchronize()
    events = {name: [] for name in names}
    for round_index in range(iters):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flusher()
            start.record()
            fns[name]()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    flushed = f", L2 flushed ({flusher.megabytes} MiB write) before each" if flusher.buffer is not None else ""
    timer = f"CUDA events, {warmup} warm-up + {iters} timed runs{flushed}" + (
        f", interleaved with {', '.join(names)} (order rotating each round)" if len(names) > 1 else "")
    return {name: summarize([start.elapsed_time(end) for start, end in pairs], timer)
            for name, pairs in events.items()}


def time_cpu(fn: Callable[[], object], warmup: int, iters: int) -> TimingStats:
    """Median and spread of `iters` runs of fn timed with time.perf_counter (CPU tensors)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return summarize(samples, f"time.perf_counter, {warmup} warm-up + {iters} timed runs (CPU)")


def time_device(fn: Callable[[], object], device: torch.device, warmup: int, iters: int,
                flusher: L2Flusher | None) -> TimingStats:
    """time_cuda on a CUDA device, time_cpu elsewhere."""
    if device.type == "cuda":
        return time_cuda(fn, warmup, iters, flusher or L2Flusher(0, device))
    return time_cpu(fn, warmup, iters)


def cpu_time_per_call(fn: Callable[[], object], device: torch.device, warmup: int, calls: int,
                      repeats: int) -> TimingStats:
    """Per-call wall time (ms) of `calls` back-to-back calls with a single synchronize after
    them, repeated `repeats` times; while each call's GPU work is shorter than its host work this
    is the host-side cost of a call."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3 / calls)
    return summarize(samples, f"time.perf_counter over {calls} back-to-back calls, one synchronize "
                              f"at the end, {repeats} repeats, {warmup} warm-up calls")


def cuda_median_ms(fn: Callable[[], Any], warmup: int = 3, iters: int = 20,
                   flusher: L2Flusher | None = None) -> float:
    """The median of time_cuda under no_grad; with `flusher` the L2 cache is flushed before
    each run (both sides of a comparison run the same way), without it not."""
    with torch.no_grad():
        return time_cuda(fn, warmup, iters,
                         flusher or L2Flusher(0, torch.device("cuda", torch.cuda.current_device()))).median_ms


def l2_flushed_medians_ms(fns: dict[str, Callable[[], Any]], warmup: int = 3,
                          iters: int = 20) -> dict[str, float]:
    """The median time of each function in ms, the L2 cache flushed before each run (a write of
    twice the current device's L2, at least 64 MiB), the functions timed interleaved
    (time_cuda_interleaved) under no_grad: the whole-module never-slower check's timer, so that it
    decides on what the benchmarks measure (docs/architecture.md: L2 flushed before each run;
    with a warm L2 a weight-heavy composed module read 3.04 ms against torch.compile's 3.36,
    flushed 3.43 against 3.33: mlp_swiglu_fused bf16 on an H200, 2026-11-26). Interleaved, since
    timed one after the other the check read that composed module at 3.288 ms against
    torch.compile's 3.297 and kept it, and the conformance benchmark, interleaved, then read 3.367
    against 3.274 (0.97x; H200, 2026-11-27)."""
    device = torch.device("cuda", torch.cuda.current_device())
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    flusher = L2Flusher(max(64, 2 * l2_bytes // (1024 * 1024)), device)
    try:
        with torch.no_grad():
            stats = time_cuda_interleaved(fns, warmup, iters, flusher)
        return {name: stat.median_ms for name, stat in stats.items()}
    finally:
        del flusher


def capture_cuda_graph(fn: Callable[[], Any], warmup_calls: int = 3,
                       pool: Any = None) -> tuple[torch.cuda.CUDAGraph, Any]:
    """(fn captured into a torch.cuda.CUDAGraph, what fn returned while captured: its tensors are
    the graph's static outputs). fn runs `warmup_calls` times on a side stream first (lazy
    initialization, allocator pools), under no_grad throughout. `pool`: a memory pool shared
    with other graphs (torch.cuda.graph_pool_handle()), else the graph's own. Raises what
    capture raises."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(warmup_calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, pool=pool):
        output = fn()
    torch.cuda.synchronize()
    return graph, output
