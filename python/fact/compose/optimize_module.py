"""`optimize`: `plan` (engine) then `apply_plan` (no engine) on one module."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

import torch

from fact.compose.apply import REMAINDERS, apply_plan
from fact.compose.guards import _module_timer
from fact.compose.inputs import _device_of, _normalize_inputs
from fact.compose.module import ComposedModule
from fact import engine_tables, module_state
from fact.compose.planning import plan_and_export
from fact.compose.training import needs_gradients
from fact.compose.training_over_ranges import optimize_for_training_over_ranges
from fact.compose.training_speed import never_slower_in_training
from fact.compose.training_module import (TrainingComposedModule, graph_work_dir,
                                          optimize_for_training)
from fact.report import FactReport
from fact.timing import Timer


@module_state.leaves_module_state_alone
def optimize(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
             precision: str | None = None, *, work_dir: str | Path | None = None,
             remainder: str = "inductor", cuda_graphs: bool | None = None,
             patterns: Iterable[str] | str | None = None, tune: int = 0,
             verify: bool = True, speed_guard: Union[bool, Timer] = True,
             replacement_guard: Union[bool, Timer, None] = None,
             tuning_db: str | Path | None = None, compile_jobs: int = 0,
             dynamic_shapes: Any = None, strict: bool = False,
             training: bool | None = None) -> ComposedModule:
    """Returns `module` with the engine's planned replacements composed as `fact::launch`
    calls: `plan` (engine) then `apply_plan` (see both, and docs/compose.md).

    precision: "strict" | "tf32" | "native", or None (the engine's choice from the graph's
    dtype). remainder: "inductor" (torch.compile of the rewritten graph, eager on failure) or
    "eager". cuda_graphs: None (default): on CUDA, a CUDA graph of the composed forward per
    signature or size tuple whose calls the host's launches bound, captured on its third call;
    True: the planned signature's forward captured now (per size tuple for declared ranges);
    False: none. A module composed for training replays its forward and backward graphs through
    CUDA graph trees only with True (fact.compose.training_graphs). patterns: None = all, else
    rule or pattern names to compose. tune: 0 = the engine's configuration (a stored tuned one when there is one); N > 0 = tune over at most N
    configurations on the GPU first. verify: check every replacement against the subgraph it
    replaces. speed_guard: never slower than torch.compile of the original; replacement_guard:
    no replacement slower than the subgraph it replaces (both: apply_plan).
    tuning_db, compile_jobs: the tuning database and the parallel kernel compiles (see plan).
    dynamic_shapes: declared dynamic dimensions, in torch.export's structure (a {dim index: Dim}
    per input, by position or by forward parameter name; fact.dynamic_ranges.Range adds a
    multiple and typical sizes; fact.dynamic_ranges.dynamic_shapes_from_spec reads the CLI's
    spelling): one module for every size in the ranges (docs/dynamic_shapes.md). strict: a call
    outside the plan (its ranges, or the planned signature) raises ValueError instead of
    running the original with a warning. training: compose for training (the forward and the
    backward graph of AOTAutograd, each planned and verified like this; docs/compose.md,
    "Training"); None (default) follows fact.compose.training.needs_gradients: grad mode on
    and an example input requiring grad, or the module in training mode with a parameter
    requiring grad. False: the inference composition (fact::launch has no backward). Never raises for a module that runs (ValueError for
    an unknown precision or remainder, or a malformed declaration); the report is
    `.fact_report`, also written to `<work_dir>/report.json`."""
    if precision is not None and precision not in engine_tables.precisions():
        raise ValueError(f"precision must be one of {', '.join(engine_tables.precisions())}, not '{precision}'")
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, not '{remainder}'")
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    if device.type == "cpu" and precision == "tf32":
        report = FactReport(precision=precision, device=str(device))
        report.leave("module", "precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are "
                               "on the CPU, where only 'strict' and 'native' compose (with the "
                               "host reference)", stage="module")
        report.runs = "the original eagerly"
        return ComposedModule(module, None, None, report)
    if training is None:
        training = needs_gradients(module, example_inputs)
    if training:
        return _optimize_for_training(module, example_inputs, precision, work_dir=work_dir, remainder=remainder,
                                      cuda_graphs=cuda_graphs, patterns=patterns, tune=tune, verify=verify,
                                      speed_guard=speed_guard, replacement_guard=replacement_guard,
                                      tuning_db=tuning_db, compile_jobs=compile_jobs,
                                      dynamic_shapes=dynamic_shapes, strict=strict)
    started = time.perf_counter()
    folder, exported = plan_and_export(module, example_inputs, precision, work_dir=work_dir, patterns=patterns,
                                       tune=tune, tuning_db=tuning_db, compile_jobs=compile_jobs,
                                       dynamic_shapes=dynamic_shapes)
    planned = time.perf_counter() - started
    composed = apply_plan(module, example_inputs, folder, remainder=remainder,
                          cuda_graphs=cuda_graphs, verify=verify, report_path=folder / "report.json",
                          speed_guard=speed_guard, replacement_guard=replacement_guard, exported=exported,
                          dynamic_shapes=dynamic_shapes, strict=strict)
    report = composed.fact_report
    # capture + the engine's plan (discovery, kernel builds, tuning) first, then apply's stages
    report.stage_seconds = {"capture and plan": planned, **report.stage_seconds}
    (folder / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return composed


def _optimize_for_training(module: torch.nn.Module, example_inputs: tuple, precision: str | None, *,
                           work_dir: str | Path | None, remainder: str, cuda_graphs: bool | None,
                           patterns: Any, tune: int, verify: bool, speed_guard: Union[bool, Timer],
                           replacement_guard: Union[bool, Timer, None], tuning_db: Any,
                           compile_jobs: int, dynamic_shapes: Any, strict: bool) -> ComposedModule:
    """optimize's training path: each AOTAutograd graph through optimize's inference path,
    into `<work_dir>/forward` and `<work_dir>/backward`. The whole-module never-slower check
    does not run on the graphs (it would compile a graph from inside AOTAutograd's
    compilation); each replacement's own speed check does (replacement_guard), and the module
    composed for training is timed as a training step uses it (training_speed)."""
    per_replacement = bool(speed_guard) if replacement_guard is None else replacement_guard

    def compose_graph(graph: torch.fx.GraphModule, inputs: tuple, which: str,
                      dynamic_shapes: Any = None) -> ComposedModule:
        return optimize(graph, inputs, precision, work_dir=graph_work_dir(work_dir, which),
                        remainder=remainder, patterns=patterns, tune=tune, verify=verify,
                        speed_guard=False, replacement_guard=per_replacement, tuning_db=tuning_db,
                        compile_jobs=compile_jobs, training=False, cuda_graphs=False,
                        dynamic_shapes=dynamic_shapes)

    if dynamic_shapes is not None:
        composed = optimize_for_training_over_ranges(module, example_inputs, dynamic_shapes, compose_graph,
                                                     strict=strict, precision=precision or "")
        if cuda_graphs:
            composed.fact_report.cuda_graphs = "off (asked for; not over declared ranges in training)"
        return _never_slower_in_training(composed, module, example_inputs, speed_guard)

    composed = optimize_for_training(module, example_inputs, compose_graph, strict=strict,
                                     cuda_graphs=bool(cuda_graphs), patterns=patterns,
                                     forms_dir=graph_work_dir(work_dir, "training_forms"))
    if cuda_graphs is None:
        composed.fact_report.cuda_graphs = (
            "off (the default in training: a replay of the next step overwrites this step's "
            "outputs; cuda_graphs=True replays the forward and backward graphs)")
    elif not cuda_graphs:
        composed.fact_report.cuda_graphs = "off (cuda_graphs=False)"
    elif not isinstance(composed, TrainingComposedModule):
        composed.fact_report.cuda_graphs = "off (asked for; nothing composed for training)"
    return _never_slower_in_training(composed, module, example_inputs, speed_guard)


def _never_slower_in_training(composed: ComposedModule, module: torch.nn.Module, example_inputs: tuple,
                              speed_guard: Union[bool, Timer]) -> ComposedModule:
    """The module composed for training timed against eager and torch.compile of the original
    (training_speed), with speed_guard's timer (on CUDA, or a callable on any device)."""
    if not isinstance(composed, TrainingComposedModule):
        return composed
    started = time.perf_counter()
    timer = _module_timer(speed_guard, _device_of(example_inputs).type == "cuda")
    if timer is not None:
        never_slower_in_training(composed, module, example_inputs, timer)
        composed.fact_report.add_time("never-slower check", time.perf_counter() - started)
    elif not speed_guard:
        composed.fact_report.notes.append("speed_guard=False: not compared with eager or torch.compile "
                                          "of the original in training")
    return composed
