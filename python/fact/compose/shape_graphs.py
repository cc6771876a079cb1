"""CUDA graphs for a module planned over declared ranges (docs/dynamic_shapes.md, "CUDA graphs"):
one graph per exact size tuple the module is called with, since a CUDA graph replays fixed
shapes and addresses.

    graphs = ShapeGraphs(fn)          # fn: the composed forward (Inductor remainder or eager)
    out = graphs(sizes, args)         # sizes: RangeGuard.check's tuple for args

A size tuple's first two calls run `fn` as is (a new shape costs no capture); the second is
timed on the host and, with two CUDA events, on the device (the first is not: a new size's
first call can hold the host far longer than later ones, which made a call bound by device
work look bound by the host). The third call decides (worth_capturing): a call that the host's
launches bound or come near bounding is captured (one warm-up call on a side stream, then the
capture) and every later call replays it, its inputs copied into the graph's static buffers
and its outputs returned as copies; a call the device's work bounds, or whose outputs would
take more than 5% of its device time to copy out (unless the host bounds it by far more),
keeps running `fn` (a graph would save nothing there, hold its activations, and copy its
outputs).
All graphs share one memory pool: they run one at a time on one stream and each output is
copied out right after its replay, so what one graph's replay overwrites is never read again.
At most `limit` graphs are kept; beyond that the least recently used one is dropped (its memory
goes back to the shared pool). A capture that fails turns the graphs off, with the reason.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable, Sequence

import torch

from fact.compose.module import _CudaGraphRunner
from fact.compose.signature import _first_line

DEFAULT_LIMIT = 64        # graphs kept at once
MAX_DEVICE_MS = 2.0       # a timed call shorter than this on the device is always captured
COPY_BYTES_PER_MS = 2.1e9  # bytes of outputs copied out per ms (GPT-2's 823 MB logits: 0.39 ms, H200)
SEEN_LIMIT = 4096         # size tuples remembered between their first and third call, or as
                          # bound by device work (least recently seen forgotten first)


class ShapeGraphs:
    """See the module docstring."""

    def __init__(self, fn: Callable, limit: int = DEFAULT_LIMIT,
                 on_change: Callable[[str], None] | None = None):
        """on_change: gets describe() after every capture, drop or failure (the report's line)."""
        self.fn = fn
        self.on_change = on_change
        self.limit = max(1, int(limit))
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: OrderedDict[tuple, _CudaGraphRunner] = OrderedDict()
        # sizes called once -> None; called twice -> (start event, end event, host ms) of the
        # second call
        self.first_calls: OrderedDict[tuple, tuple | None] = OrderedDict()
        self.uncaptured: OrderedDict[tuple, None] = OrderedDict()   # sizes bound by device work
        self.captured = 0           # graphs captured so far (dropped ones included)
        self.dropped = 0
        self.pool_bytes = 0         # memory the shared pool and the static buffers reserved
        self.failed = ""            # why capture is off ("" while on)

    def __call__(self, sizes: tuple, args: Sequence[Any]):
        runner = self.graphs.get(sizes)
        if runner is not None:
            self.graphs.move_to_end(sizes)
            return runner(args)
        if self.failed or sizes in self.uncaptured:
            return self.fn(*args)
        if sizes not in self.first_calls:
            _remember(self.first_calls, sizes, None)
            return self.fn(*args)
        timed = self.first_calls.pop(sizes)
        if timed is None:
            return self._timed_call(sizes, args)
        start, end, host_ms, output_bytes = timed
        end.synchronize()
        if not worth_capturing(start.elapsed_time(end), host_ms, output_bytes):
            _remember(self.uncaptured, sizes, None)
            self._changed()
            return self.fn(*args)
        runner = self.capture(sizes, args)
        return runner(args) if runner is not None else self.fn(*args)

    def _timed_call(self, sizes: tuple, args: Sequence[Any]):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        began = time.perf_counter()
        out = self.fn(*args)
        host_ms = (time.perf_counter() - began) * 1e3
        end.record()
        output_bytes = sum(t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(out)
                           if isinstance(t, torch.Tensor))
        _remember(self.first_calls, sizes, (start, end, host_ms, output_bytes))
        return out

    def capture(self, sizes: tuple, args: Sequence[Any]) -> _CudaGraphRunner | None:
        """The graph of `sizes` captured now with `args` (kept; None when capture failed)."""
        if sizes in self.graphs:
            return self.graphs[sizes]
        before = torch.cuda.memory_reserved()
        try:
            runner = _CudaGraphRunner(self.fn, args, warmup_calls=1, pool=self.pool)
        except Exception as error:  # noqa: BLE001 - capture trouble: run without graphs
            self.failed = f"capture failed at sizes {sizes}: {_first_line(error)}"
            self._changed()
            return None
        self.pool_bytes += max(0, torch.cuda.memory_reserved() - before)
        self.graphs[sizes] = runner
        self.captured += 1
        while len(self.graphs) > self.limit:
            self.graphs.popitem(last=False)
            self.dropped += 1
        self._changed()
        return runner

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.describe())

    def describe(self) -> str:
        """The report's `cuda_graphs` line."""
        if self.failed:
            return f"off ({self.failed})"
        return (f"on, one per signature or size tuple whose calls the host's launches bound (captured "
                f"at its third call; at most {self.limit} kept): {len(self.graphs)} kept, "
                f"{self.captured} captured, {len(self.uncaptured)} left uncaptured (bound by "
                f"device work), {self.pool_bytes / 2**20:.1f} MiB reserved for them")


def worth_capturing(device_ms: float, host_ms: float, output_bytes: int) -> bool:
    """Whether a call that took `device_ms` on the device and `host_ms` on the host, returning
    `output_bytes`, runs as a graph. Not when copying the outputs out of the graph (at
    COPY_BYTES_PER_MS) costs more than 5% of the device time, unless the host bounds the call
    by more than twice that copy (host_ms - device_ms): an LM head's 823 MB of logits took
    0.96 ms in FACT's kernel and 1.77 ms as a graph, where torch.compile's call took 0.92 ms
    (H200, `bench/results/unaligned-nvidia-h200-2026-11-29.json`). Otherwise always for a short call
    (device_ms under MAX_DEVICE_MS: launch latency dominates), and for a longer one when the
    host's launches come near bounding it (device time under twice the host time: a BERT-base
    forward ran 7.04 ms as a graph and 8.14 ms without one, its kernels 6.68 ms, in two
    whole-model runs on an H200; GPT-2's 823 MB of logits: 0.39 ms of a 5.2 ms forward, which
    ran 5.37 ms without a graph and 5.62 with one)."""
    copy_ms = output_bytes / COPY_BYTES_PER_MS
    if copy_ms > 0.05 * device_ms and 2.0 * copy_ms >= host_ms - device_ms:
        return False
    if device_ms < MAX_DEVICE_MS:
        return True
    return device_ms < 2.0 * host_ms


def _remember(seen: OrderedDict, sizes: tuple, value: Any) -> None:
    """Adds `sizes` to `seen`, forgetting the oldest beyond SEEN_LIMIT."""
    seen[sizes] = value
    while len(seen) > SEEN_LIMIT:
        seen.popitem(last=False)
