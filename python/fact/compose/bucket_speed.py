"""Never slower, per bucket (docs/dynamic_shapes.md): a module planned over declared ranges is
timed at each bucket tuple's edge sizes (as a CUDA graph replay when the module has CUDA
graphs) against torch.compile of the original (symbolic shapes)
and the original eagerly; a bucket where the composed module is slower than the faster of
those by more than SLOWER_BY runs that one for the bucket only (ComposedModule looks the
bucket up per call)."""
from __future__ import annotations

from typing import Any, Callable

import torch

from fact.compose.dynamic_plan import SymbolBinding
from fact.compose.module import ComposedModule
from fact.compose.signature import _first_line
from fact.symbolic_sizes import BucketTable
from fact.timing import CandidatesTimer

TIMED_TUPLES_LIMIT = 64   # beyond this many bucket tuples, only those at the ranges' ends are timed


def edge_tuples(table: BucketTable, limit: int = TIMED_TUPLES_LIMIT) -> list[tuple[int, tuple]]:
    """(row, edge tuple) of the bucket tuples to warm and time: all of them up to `limit`,
    else those where every symbol is at its first or last edge."""
    tuples = list(enumerate(table.edge_tuples()))
    if len(tuples) <= limit:
        return tuples
    ends = [{values[0], values[-1]} for values in table.edges]
    return [(row, sizes) for row, sizes in tuples if all(v in end for v, end in zip(sizes, ends))]


def edge_inputs(binding: SymbolBinding, table: BucketTable, example_inputs: tuple,
                limit: int = TIMED_TUPLES_LIMIT) -> list[tuple[int, tuple, tuple]]:
    """(row, sizes, module inputs at those sizes) per bucket tuple edge_tuples picks."""
    return [(row, sizes, binding.inputs_at(sizes, example_inputs, seed=7000 + row))
            for row, sizes in edge_tuples(table, limit)]


def never_slower_per_bucket(composed: ComposedModule, module: torch.nn.Module,
                            compiled_original: Callable | None, buckets: list, binding: SymbolBinding,
                            timer: CandidatesTimer, slower_by: float) -> None:
    """Times composed / torch.compile of the original / eager at each bucket's edge inputs
    (`buckets`: edge_inputs' list) and fills composed's per-bucket fallback table and the
    report's `buckets`. A bucket that cannot be timed keeps the composed module, with a note."""
    report = composed.fact_report
    fallbacks: dict[int, Callable] = {}
    for row, sizes, inputs in buckets:
        # The composed module as a user calls it (range guard, state and derived-operand checks,
        # the composed forward; no bucket fallback is set yet); with CUDA graphs, the timer's
        # warm-up calls capture a launch-bound size as a call does.
        candidates: dict[str, Callable[[], Any]] = {
            "composed": lambda inputs=inputs: composed(*inputs),
            "eager": lambda inputs=inputs: module(*inputs)}
        if compiled_original is not None:
            candidates["compiled"] = lambda inputs=inputs: compiled_original(*inputs)
        entry: dict[str, Any] = {"sizes": binding.describe(sizes), "row": row}
        try:
            with torch.no_grad():
                times = timer(candidates)
        except Exception as error:  # noqa: BLE001 - timing trouble keeps the composed module
            entry["runs"] = f"composed (not timed: {_first_line(error)})"
            report.buckets.append(entry)
            continue
        entry.update({f"{name}_ms": ms for name, ms in times.items()})
        baseline_name = min((n for n in times if n != "composed"), key=lambda n: times[n])
        if times["composed"] > slower_by * times[baseline_name]:
            fallbacks[row] = compiled_original if baseline_name == "compiled" else module
            entry["runs"] = "torch.compile of the original" if baseline_name == "compiled" else "the original eagerly"
        else:
            entry["runs"] = "composed"
        report.buckets.append(entry)
    composed.__dict__["_bucket_fallbacks"] = fallbacks
    timed = len(buckets)
    slower = len(fallbacks)
    report.runs = (f"composed in {timed - slower} of {timed} timed bucket tuple(s)"
                   + (f"; {slower} run the faster of torch.compile and eager (the composed module "
                      f"was more than {slower_by - 1:.0%} slower there)" if slower else ""))
