"""fact.timing's interleaved timer (the conformance benchmark's FACT / eager / torch.compile
comparison) on a GPU: every function is timed `iters` times, in rotating order, and a function
that does more work reads slower than one that does less."""
from __future__ import annotations

import pytest
import torch

from fact.timing import L2Flusher, time_cuda_interleaved

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timed,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)"),
]


def test_interleaved_timing_times_each_function_every_round():
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    calls = []

    def small():
        calls.append("small")
        return a @ a

    def large():
        calls.append("large")
        return [a @ a for _ in range(8)]

    stats = time_cuda_interleaved({"small": small, "large": large}, warmup=2, iters=10,
                                  flusher=L2Flusher(64, device))
    assert set(stats) == {"small", "large"}
    assert all(s.runs == 10 and s.min_ms > 0 for s in stats.values())
    assert "interleaved" in stats["small"].timer and "L2 flushed" in stats["small"].timer
    timed = calls[4:]  # after the warm-up: rounds of one call each, the order rotating
    assert [timed[i:i + 2] for i in (0, 2)] == [["small", "large"], ["large", "small"]]
    assert stats["large"].median_ms > 4 * stats["small"].median_ms


def test_l2_flushed_medians_ms_reads_a_cold_cache_slower_than_a_warm_one():
    """The whole-module never-slower check's timer flushes L2 before each run: reading a 16 MiB
    tensor (it fits the L2 of an H100 / H200) takes longer from a flushed cache. The warm side
    keeps the GPU busy before each run too (a sleep kernel, which touches no memory), so neither
    side times the host's launch latency: timed back to back on a loaded host (the device scripts
    build and test side by side), the warm reads measured the launch gap and came out slower."""
    from fact.timing import l2_flushed_medians_ms
    import statistics

    x = torch.randn(4 * 1024 * 1024, device="cuda")  # 16 MiB

    def read():
        return x.sum()

    for _ in range(3):
        read()
    samples = []
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(200_000)  # ~0.1 ms of GPU work ahead of the timed read, L2 left warm
        start.record()
        read()
        end.record()
        samples.append((start, end))
    torch.cuda.synchronize()
    warm = statistics.median(s.elapsed_time(e) for s, e in samples)
    cold = l2_flushed_medians_ms({"read": read})["read"]
    assert cold > 0 and warm > 0
    assert cold > 1.05 * warm, (cold, warm)
