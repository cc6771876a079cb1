"""`plan`: the module captured as graph JSON and planned by the engine in process
(`fact_engine_plan`); whatever goes wrong is written as an "unplanned" plan with the reason."""
from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from fact import _engine, engine_tables, module_state
from fact.compose.inputs import _device_of, _input_specs, _normalize_inputs, _normalize_patterns
from fact.compose.plan_file import PLAN_FILE, PLAN_SCHEMA
from fact.compose.signature import _first_line
from fact.graph_capture import capture_exported
from fact.graph_writer import CaptureError



def _unplanned_doc(precision: str | None, device: torch.device, example_inputs: tuple,
                   patterns: list[str] | None, reason: str, capture_name: str = "") -> dict:
    return {"schema": PLAN_SCHEMA, "abi_version": None, "precision": precision or "",
            "device": device.type, "inputs": _input_specs(example_inputs), "status": "unplanned",
            "reason": reason, "capture": capture_name, "patterns": patterns, "kernels": {},
            "replacements": [], "notes": []}


def plan(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, precision: str | None = None,
         *, work_dir: str | Path | None = None, patterns: Iterable[str] | str | None = None,
         tune: int = 0, compile_kernels: bool | None = None,
         tuning_db: str | Path | None = None, compile_jobs: int = 0) -> Path:
    """Plans the composition of `module` for `example_inputs` and returns the folder holding
    `plan.json` (`work_dir`, or a fresh temporary folder).

    Captures the module as graph JSON (fact.graph_capture) and calls the engine in process
    (`fact_engine_plan`), which discovers, realizes and, with `tune` > 0 on a GPU, tunes, and
    writes the plan (docs/plan.md). `precision`: strict | tf32 | native, or None for the
    engine's choice from the graph's dtype. `compile_kernels` None compiles when the inputs are
    on a GPU. `tuning_db`: the tuning database to read stored choices from and to store tuned
    ones in (None: the engine's default, <FACT cache root>/tuning_db.json). `compile_jobs`:
    parallel kernel compiles (0: one per core). Raises ValueError for an unknown precision;
    everything else that goes wrong (capture, a missing engine) is written as an "unplanned"
    plan with the reason."""
    return plan_and_export(module, example_inputs, precision, work_dir=work_dir, patterns=patterns, tune=tune,
                           compile_kernels=compile_kernels, tuning_db=tuning_db, compile_jobs=compile_jobs)[0]


def plan_and_export(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, precision: str | None = None,
                    *, work_dir: str | Path | None = None, patterns: Iterable[str] | str | None = None,
                    tune: int = 0, compile_kernels: bool | None = None,
                    tuning_db: str | Path | None = None, compile_jobs: int = 0,
                    dynamic_shapes: Any = None) -> tuple[Path, torch.export.ExportedProgram | None]:
    """`plan`, also returning the torch.export program the plan was made from (None when there
    is none): apply_plan(..., exported=) rewrites it instead of exporting the module again. The
    graph goes to the engine in memory; graph.json in the work folder is for the reader.
    `dynamic_shapes`: declared dynamic dimensions (torch.export's structure, Dim or
    fact.dynamic_ranges.Range values): the graph carries symbols and the engine plans the
    ranges (docs/dynamic_shapes.md); ValueError for a malformed declaration."""
    if precision is not None and precision not in engine_tables.precisions():
        raise ValueError(f"precision must be one of {', '.join(engine_tables.precisions())}, not '{precision}'")
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    folder = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="fact_compose_"))
    folder.mkdir(parents=True, exist_ok=True)
    selected = _normalize_patterns(patterns)
    compile_kernels = device.type == "cuda" if compile_kernels is None else bool(compile_kernels)

    def unplanned(reason: str, capture_name: str = "") -> tuple[Path, None]:
        doc = _unplanned_doc(precision, device, example_inputs, selected, reason, capture_name)
        (folder / PLAN_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        return folder, None

    if device.type not in ("cpu", "cuda"):
        return unplanned(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                         f"(host reference) only")
    graph_json = folder / "graph.json"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph, exported = capture_exported(module, example_inputs, graph_json,
                                               dynamic_shapes=dynamic_shapes)
    except ValueError:
        raise
    except CaptureError as error:
        return unplanned(f"cannot be exported with torch.export, nor captured: {error}")
    except Exception as error:  # noqa: BLE001
        return unplanned(f"capture failed: {_first_line(error)}")
    capture_name = graph["source"]["capture"]
    if capture_name != "torch.export":
        export_error = (graph["source"].get("export_error") or "").splitlines()[:1] or [""]
        return unplanned(f"cannot be exported with torch.export ({export_error[0]}); composition "
                         f"needs one exported graph", capture_name)
    if graph["source"].get("state_not_kept"):
        # The exported graph holds that state as constants (fact.module_state.forward_writes).
        return unplanned(module_state.ForwardWrites(not_kept=graph["source"]["state_not_kept"]).reason(),
                         capture_name)
    request = {"graph_json": json.dumps(graph), "out_dir": str(folder), "precision": precision or "",
               "compile": compile_kernels, "tune": int(tune), "patterns": selected,
               "tuning_db": str(tuning_db) if tuning_db is not None else None,
               "device_profile": None, "jobs": int(compile_jobs), "progress": False,
               "inputs": _input_specs(example_inputs), "device": device.type}
    try:
        code, response = _engine.engine_library().plan(request)
    except _engine.EngineNotFound as error:
        return unplanned(str(error), capture_name)
    plan_file = folder / PLAN_FILE
    if code != 0 or response.get("status") != "ok" or not plan_file.is_file():
        return unplanned(f"the engine wrote no plan: {response.get('error') or response}", capture_name)
    return folder, exported


def engine_can_plan() -> tuple[bool, str]:
    """(whether plan() can reach the engine's fact_engine_plan here, why not)."""
    try:
        library = _engine.engine_library()
    except _engine.EngineNotFound as error:
        return False, str(error)
    if not library.has("fact_engine_plan"):
        return False, f"the engine library {library.path} does not export fact_engine_plan yet"
    return True, ""
