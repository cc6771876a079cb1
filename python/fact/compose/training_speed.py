"""Never slower in training (docs/compose.md, "Training", "Never slower"): a module composed for
training is timed doing what a training step does with it, a forward and a backward of its
outputs, against the original run eagerly and torch.compile of the original, on the example
inputs; over declared ranges, at the edge sizes of each bucket tuple the engine planned the
graphs over. Where the composed module is
slower than the faster of those by more than SLOWER_BY, that one runs the calls (over ranges:
the calls whose sizes fall in that bucket); the report's `runs`, `speed` and `buckets` say what
was found.

A timed step: the module's outputs (its floating-point leaves that need gradients) are
differentiated with torch.autograd.grad against fixed random cotangents, with respect to the
parameters that require grad, so no `.grad` accumulates; the module's state, parameters and
random streams are kept (training_memory.state_kept). The optimizer step is left out: it is the
same for every candidate.

    never_slower_in_training(composed, module, example_inputs, timer)
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from fact.compose.bucket_speed import edge_tuples
from fact.compose.signature import _first_line
from fact.compose.training_memory import state_kept
from fact.symbolic_sizes import BucketTable
from fact.timing import CandidatesTimer

SLOWER_BY = 1.02          # as the inference path's never-slower check (fact.compose.guards)
TIMED_TUPLES_LIMIT = 16   # over more bucket tuples than this, those at the ranges' ends are timed


def compiled_for_training(module: torch.nn.Module, dynamic: bool) -> Callable:
    """torch.compile of the original, the baseline a user would pick for training (symbolic
    shapes over declared ranges). A function of its own so that tests on the CPU can stand in
    for it (Inductor's CPU compiles of a training graph take minutes)."""
    return torch.compile(module, dynamic=dynamic)


def _differentiable(outputs: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(outputs)
            if isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.is_floating_point()]


def _training_step(forward: Callable, inputs: tuple, wrt: list[torch.Tensor],
                   cotangents: list[torch.Tensor]) -> Callable[[], None]:
    def step() -> None:
        with torch.enable_grad():   # timers run their candidates under no_grad
            outputs = _differentiable(forward(*inputs))
            torch.autograd.grad(outputs, wrt, cotangents, allow_unused=True)
    return step


def _cotangents(module: torch.nn.Module, inputs: tuple, seed: int) -> list[torch.Tensor]:
    with torch.enable_grad():
        outputs = _differentiable(module(*inputs))
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=generator, dtype=torch.float32).to(o.device, o.dtype)
            for o in outputs]


def _candidates(composed: Callable, module: torch.nn.Module, compiled: Callable | None,
                inputs: tuple, wrt: list[torch.Tensor], seed: int) -> dict[str, Callable[[], None]]:
    cotangents = _cotangents(module, inputs, seed)
    candidates = {"composed": _training_step(composed, inputs, wrt, cotangents),
                  "eager": _training_step(module, inputs, wrt, cotangents)}
    if compiled is not None:
        candidates["compiled"] = _training_step(compiled, inputs, wrt, cotangents)
    return candidates


def _faster_baseline(times: dict[str, float]) -> str:
    return min((name for name in times if name != "composed"), key=lambda name: times[name])


RUNS = {"compiled": "torch.compile of the original", "eager": "the original eagerly"}


def never_slower_in_training(composed: Any, module: torch.nn.Module, example_inputs: tuple,
                             timer: CandidatesTimer) -> None:
    """Times `composed` (a TrainingComposedModule, or a RangeTrainingComposedModule) as the
    module docstring says and sets its fallbacks (`set_speed_fallback`, per bucket over ranges)
    and its report. Timing trouble keeps the composed module, with a note."""
    report = composed.fact_report
    wrt = [p for p in module.parameters() if p.requires_grad] or \
        [x for x in example_inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    if not wrt:
        report.notes.append("never-slower check in training not done: nothing requires grad")
        return
    over_ranges = hasattr(composed, "declared_ranges")
    try:
        compiled = compiled_for_training(module, dynamic=over_ranges)
    except Exception as error:  # noqa: BLE001 - no compiled baseline: eager only
        compiled = None
        report.notes.append(f"torch.compile of the original for training: {_first_line(error)}")
    with state_kept(module, example_inputs):
        if over_ranges:
            _per_bucket(composed, module, compiled, example_inputs, wrt, timer)
        else:
            _whole(composed, module, compiled, example_inputs, wrt, timer)


def _whole(composed: Any, module: torch.nn.Module, compiled: Callable | None, inputs: tuple,
           wrt: list, timer: CandidatesTimer) -> None:
    report = composed.fact_report
    try:
        times = timer(_candidates(composed, module, compiled, inputs, wrt, seed=7000))
    except Exception as error:  # noqa: BLE001 - timing trouble keeps the composed module
        report.notes.append(f"never-slower check in training not done: {_first_line(error)}")
        return
    baseline = _faster_baseline(times)
    report.speed = {"composed_ms": times["composed"], "original_ms": times[baseline],
                    "original": RUNS[baseline], "eager_ms": times["eager"], "threshold": SLOWER_BY,
                    "timed": "a training step's forward and backward"}
    if "compiled" in times:
        report.speed["compiled_ms"] = times["compiled"]
    others = "; ".join(f"{RUNS[name]} {ms:.4g} ms" for name, ms in times.items() if name != "composed")
    if times["composed"] > SLOWER_BY * times[baseline]:
        composed.set_speed_fallback(compiled if baseline == "compiled" else module)
        report.runs = (f"{RUNS[baseline]}: a forward and backward of the composed module took "
                       f"{times['composed']:.4g} ms, {others} (more than {SLOWER_BY - 1:.0%} faster)")
    else:
        report.runs = (f"composed forward and backward graphs ({times['composed']:.4g} ms a forward and "
                       f"backward; {others})")


def _inputs_at(example_inputs: tuple, declared: dict, sizes: dict, seed: int) -> tuple:
    """The example inputs at `sizes` ({name: size}) along their declared dimensions, each filled
    with values drawn from the example's own (token ids stay valid ids, masks stay masks)."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for index, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            result.append(x)
            continue
        shape = [sizes[declared[(index, dim)].name] if (index, dim) in declared else int(size)
                 for dim, size in enumerate(x.shape)]
        flat = x.detach().reshape(-1)
        picks = torch.randint(flat.numel(), shape, generator=generator).to(flat.device)
        result.append(flat[picks].requires_grad_(x.requires_grad))
    return tuple(result)


def _per_bucket(composed: Any, module: torch.nn.Module, compiled: Callable | None, example_inputs: tuple,
                wrt: list, timer: CandidatesTimer) -> None:
    report = composed.fact_report
    declared = composed.declared_ranges()
    names = sorted({declared_range.name for declared_range in declared.values()})
    # the buckets the engine planned the graphs over (its symbols carry the declared names;
    # their ranges start at dynamo's lower bound, 2)
    planned = {symbol["name"]: symbol for graph in (report.forward, report.backward) if graph is not None
               for symbol in graph.symbols}
    missing = [name for name in names if name not in planned]
    if missing:
        report.notes.append(f"never-slower check in training not done: the plans have no buckets for "
                            f"{', '.join(missing)}")
        return
    table = BucketTable.from_symbols([planned[name] for name in names])
    fallbacks: dict[int, Callable] = {}
    for row, sizes in edge_tuples(table, TIMED_TUPLES_LIMIT):
        by_name = dict(zip(table.names, sizes))
        entry: dict[str, Any] = {"sizes": ", ".join(f"{n}={s}" for n, s in by_name.items()), "row": row}
        try:
            inputs = _inputs_at(example_inputs, declared, by_name, seed=7000 + row)
            times = timer(_candidates(composed, module, compiled, inputs, wrt, seed=7000 + row))
        except Exception as error:  # noqa: BLE001 - timing trouble keeps the composed module
            entry["runs"] = f"composed (not timed: {_first_line(error)})"
            report.buckets.append(entry)
            continue
        entry.update({f"{name}_ms": ms for name, ms in times.items()})
        baseline = _faster_baseline(times)
        if times["composed"] > SLOWER_BY * times[baseline]:
            fallbacks[row] = compiled if baseline == "compiled" else module
            entry["runs"] = RUNS[baseline]
        else:
            entry["runs"] = "composed"
        report.buckets.append(entry)
    composed.set_bucket_fallbacks(table, fallbacks)
    timed = sum(1 for entry in report.buckets if "composed_ms" in entry)
    report.runs = (f"composed forward and backward graphs in {timed - len(fallbacks)} of {timed} timed "
                   f"bucket tuple(s) (a training step's forward and backward)"
                   + (f"; {len(fallbacks)} run the faster of torch.compile and eager (the composed module "
                      f"was more than {SLOWER_BY - 1:.0%} slower there)" if fallbacks else ""))
