"""The GPU benchmark's driver (`run_gpu`) and its measurement worker (`_worker`): the driver
runs the prepare phase (prepare.py), then the queued cases in worker processes
(`python -m fact.conformance --worker`: one lane of them per GPU, lanes.py; a fresh one when a
case takes its process down), and assembles the results file, its table and plot from the case
records (`_Run`)."""
from __future__ import annotations

import argparse
import gc
import json
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Sequence

import torch

from fact.conformance.corpus import (_first_line, case_record, corpus_files, load_json,
                                     write_json)
from fact.conformance.gpu_case import (STRICT_CATEGORIES, WORKER_LOST_EXIT, _log, gpu_cases,
                                       run_gpu_case)
from fact.conformance.lanes import (LaneError, Measurements, check_resumable, claim_case,
                                    current_path, lane_gpus, pin_to_lane, resumed_records,
                                    write_device)
from fact.conformance.gpu_report import render_gpu_markdown
from fact.conformance.run_files import _Run
from fact.conformance.prepare import (_PreparePhase, cache_activity, cache_counters,
                                      share_compile_caches, shared_caches, with_prepare_record)


def record_unmeasured(run: _Run, pending: Sequence[tuple[int, str, str]]) -> None:
    """Every queued case without a record when the run ends (it was being measured or prepared
    when the time cap or a signal stopped the run, or never started) is recorded as skipped, so
    the results file lists it and a --resume measures it."""
    recorded = {int(p.name.split("-", 1)[0]) for p in run.cases_dir.glob("*.json")}
    for index, file, dtype_name in pending:
        if index not in recorded:
            run.record(index, case_record(Path(file).stem, dtype_name, "skipped",
                                          "the run stopped (its time cap or a signal) before this case "
                                          "was measured"))


def _settings(args: argparse.Namespace, cases: Sequence[tuple[Path, str]]) -> dict:
    subset = "QUICK subset" if args.quick else ("--models " + ",".join(args.models) if args.models
                                               else "whole corpus (QUICK first)")
    sizes = "full-size constants" if args.sizes == "full" else "CPU_TEST_SIZES (smoke test)"
    budget = f", time budget {args.time_budget:.0f} s (cases that would start later are skipped)" \
        if args.time_budget else ""
    prepare = (f"; before the measurements {args.prepare_jobs} parallel workers warmed the kernel "
               f"and Inductor caches (prepare phase, budget "
               f"{f'{args.prepare_budget:.0f} s' if args.prepare_budget else 'unlimited'})"
               if args.prepare_jobs else "")
    lanes = (f"; measured in {args.gpus} lanes, one per GPU (each case on one GPU, which its record "
             f"names)" if args.gpus > 1 else "")
    return {"tune": args.tune, "sizes": args.sizes, "iters": args.iters, "warmup": args.warmup,
            "flush_mb": args.flush_mb, "time_budget_s": args.time_budget, "device": args.device,
            "prepare_jobs": args.prepare_jobs, "prepare_budget_s": args.prepare_budget,
            "lanes": args.gpus,
            "caches": shared_caches(),
            "cases_requested": [f"{p.stem}:{d}" for p, d in cases],
            "note": (f"{len(cases)} cases ({subset}), the files' {sizes}, bf16 in native for every "
                     f"file and float32 in strict for the {'/'.join(STRICT_CATEGORIES)} files; "
                     f"FACT tuned over {args.tune} configuration(s) per kernel (tuning database "
                     f"shared across models), Inductor remainder, never-slower guard on; "
                     f"torch.compile default mode; {args.warmup} warm-up + {args.iters} timed runs, "
                     f"median, L2 flushed ({args.flush_mb} MiB) before each, eager / torch.compile / "
                     f"FACT interleaved run by run{budget}{prepare}{lanes}")}


def _worker(args: argparse.Namespace) -> int:
    """A measurement worker of lane --lane (lanes.py): takes the queued cases no lane took yet, in
    queue order, and runs each, recording it (ok, wrong or failed) and rewriting the results
    after each; records those it takes past the deadline as skipped."""
    started = args.started or time.time()
    run = _Run(args.out_dir, args.work_dir, args.date, args.variant)
    queue = json.loads(Path(args.queue).read_text())
    settings = json.loads((run.work_dir / "settings.json").read_text())
    pin_to_lane(args.lane, args.lanes)
    write_device(run.work_dir, args.device)
    current = current_path(run.work_dir, args.lane)
    for index, file, dtype_name in queue:
        path = Path(file)
        stem, name = path.stem, f"{path.stem}-{dtype_name}"
        if not claim_case(run.work_dir, index, name, args.lane):
            continue
        where = {"gpu": args.gpu_name} if args.gpu_name else {}
        if args.deadline and time.time() > args.deadline:
            run.record(index, with_prepare_record(
                case_record(stem, dtype_name, "skipped", "time budget spent before it started"), run.work_dir))
            continue
        write_json(current, {"index": index, "name": name})
        counters_before = cache_counters()
        try:
            case = run_gpu_case(path, dtype_name, run.work_dir / "optimize" / name,
                                device=args.device, sizes=args.sizes, tune=args.tune,
                                warmup=args.warmup, iters=args.iters, flush_mb=args.flush_mb,
                                started=started)
        except Exception as error:  # noqa: BLE001 - recorded, the next case runs
            case = case_record(stem, dtype_name, "failed", _first_line(error),
                               traceback=traceback.format_exc(limit=-6))
            _log(f"{name}: FAILED: {case['reason']}", started)
        case["caches"] = cache_activity(counters_before, cache_counters())
        case.update(where)
        run.record(index, with_prepare_record(case, run.work_dir))
        current.unlink(missing_ok=True)
        run.write(settings)
        torch._dynamo.reset()
        gc.collect()
        if args.device.startswith("cuda"):
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as error:  # noqa: BLE001 - a sticky CUDA error: a fresh process goes on
                _log(f"the CUDA context is unusable after {name} ({_first_line(error)}); this "
                     f"worker stops, a fresh one takes the remaining cases", started)
                return WORKER_LOST_EXIT
    return 0


def _prepare_deadline(args: argparse.Namespace, started: float, deadline: float) -> float:
    """When the prepare phase ends at the latest (0: no limit): --prepare-budget seconds after
    the start, never after the run's own deadline."""
    if not args.prepare_budget:
        return deadline
    end = started + args.prepare_budget
    return min(end, deadline) if deadline else end


def run_gpu(args: argparse.Namespace) -> int:
    """The driver: with --resume, first takes the cases an earlier results file measured; with
    --prepare-jobs, then the prepare phase (_PreparePhase: the cases' compile work in parallel
    workers, until --prepare-budget); then the measurements (lanes.Measurements: one lane per GPU
    of --gpus, each running worker processes one after another: a case that takes its process
    down is recorded as failed with the worker's last output and a fresh worker of that lane
    takes the rest); then writes the results file, its table and its plot. SIGTERM/SIGINT stop
    whichever phase runs and keep what was measured."""
    started = time.time()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("fact.conformance --gpu: no CUDA GPU here (run it on a Hopper GPU; --device cpu "
              "--sizes cpu is a smoke test of the runner)", file=sys.stderr)
        return 2
    try:
        gpus = lane_gpus(args.device, args.gpus)
        previous = None
        if args.resume:
            previous = load_json(args.resume)
            if previous is None:
                raise LaneError(f"--resume {args.resume}: no such results file (or not JSON)")
            check_resumable(previous, args.resume)
            if args.device.startswith("cuda"):
                here = torch.cuda.get_device_properties(0).name  # the lanes' GPUs are of one kind
                if previous.get("device") != here:
                    raise LaneError(f"--resume {args.resume}: its cases were measured on "
                                    f"{previous.get('device')}, this is {here}; one results file "
                                    f"holds one device's measurements (run the whole corpus here, "
                                    f"or go on on {previous.get('device')})")
    except LaneError as error:
        print(f"fact.conformance --gpu: {error}", file=sys.stderr)
        return 2
    share_compile_caches()
    files = [Path(f) for f in args.files] or corpus_files(args.corpus)
    cases = gpu_cases(files, args.models, args.quick, args.dtypes)
    run = _Run(args.out_dir, args.work_dir, args.date, args.variant)
    settings = _settings(args, cases)
    settings["gpus"] = [g for g in gpus if g is not None]
    pending = [(i, str(p), d) for i, (p, d) in enumerate(cases)]
    if previous is not None:
        resumed = resumed_records(previous, pending, args.remeasure or ())
        for index, case in resumed.items():
            run.record(index, case)
        pending = [c for c in pending if c[0] not in resumed]
        settings["resumed"] = {"from": str(args.resume), "device": previous.get("device"),
                               "date": previous.get("date"), "cases": len(resumed)}
        _log(f"--resume: {len(resumed)} cases measured in {args.resume} are kept", started)
    write_json(run.work_dir / "settings.json", settings)
    deadline = started + args.time_budget if args.time_budget else 0.0
    _log(f"{len(pending)} cases: {', '.join(f'{Path(f).stem}:{d}' for _, f, d in pending)}", started)
    prepare = None
    if args.prepare_jobs > 0 and pending:
        prepare = _PreparePhase(run, pending, args, started, _prepare_deadline(args, started, deadline),
                                gpus=gpus)
        if not settings["caches"]["fx_graph_cache"]:
            _log("Inductor's FX graph cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE): the prepare "
                 "phase warms the kernel and Triton caches only", started)
    measurements = Measurements(run, pending, args, started, deadline, gpus)
    stopping = [False]

    def stop(signum, frame):  # noqa: ARG001 - SIGTERM/SIGINT: stop the workers, keep the results
        if stopping[0]:
            return  # already stopping: let the first stop finish writing the results
        stopping[0] = True
        if prepare is not None:
            prepare.interrupt()
        measurements.interrupt()
        raise KeyboardInterrupt

    previous_handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}

    try:
        if prepare is not None:
            try:
                prepare.run()
            finally:
                settings["prepare"] = prepare.summary()
                write_json(run.work_dir / "settings.json", settings)
        if pending:
            measurements.run()
    except KeyboardInterrupt:
        _log("stopped: writing what was measured", started)
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    record_unmeasured(run, pending)
    if not load_json(run.work_dir / "device.json"):
        if previous is not None and previous.get("device"):
            write_json(run.work_dir / "device.json", {"device": previous["device"],
                                                      "versions": previous.get("versions", {})})
        else:
            write_json(run.work_dir / "device.json", {"device": args.device, "versions": {}})
    path = run.write(settings, plot=True)
    doc = load_json(path) or {}
    print("\n" + render_gpu_markdown(doc), flush=True)
    print(f"results: {path}\ntable: {path.with_suffix('.md')}\nplot: {path.with_suffix('.png')}", flush=True)
    return 0
