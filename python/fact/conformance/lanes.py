"""The measurement lanes of the GPU benchmark: one per GPU (`--gpus N`), each a sequence of
measurement worker processes (`python -m fact.conformance --worker --lane L`) that see only
their own GPU (CUDA_VISIBLE_DEVICES) and run on their own slice of the CPU cores, so that one
lane's compiles do not disturb another lane's timing. The lanes share one queue: a worker takes
the next case no lane took yet (a hard link, `claim_case`, that one worker wins), so a lane that
drew short cases takes more of them. A case that takes its worker down is recorded as failed
from the lane's current-<lane>.json and a fresh worker of the same lane goes on.

With one lane (the default) this is the serial measurement of a one-GPU machine: the worker
sees the GPUs the driver sees and the cores it has. `--device cpu` runs the same lanes without
GPUs (a smoke test of the runner on a CPU machine: the lanes then share the cores)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from fact.conformance.corpus import case_record, load_json, write_json
from fact.conformance.gpu_case import _log
from fact.conformance.prepare import claim, with_prepare_record

if TYPE_CHECKING:
    from fact.conformance.run_files import _Run


MEASURE_DIR = "measure"   # under the work dir: the lanes' claims and their workers' logs


class LaneError(ValueError):
    """The GPUs asked for are not there (its message says what is)."""


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (its entries, or
    0..count-1 when it is not set)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def lane_gpus(device: str, count: int) -> list[str | None]:
    """The GPU of each lane: the first `count` visible GPUs (0: all of them) on a CUDA device;
    `count` lanes without a GPU (None) on the CPU (at least one). Raises LaneError when fewer
    GPUs are visible than asked for."""
    if not device.startswith("cuda"):
        return [None] * max(1, count)
    gpus = visible_gpus()
    if count == 0:
        count = len(gpus)
    if count > len(gpus) or count < 1:
        raise LaneError(f"--gpus {count}: {len(gpus)} GPU(s) visible "
                        f"({', '.join(gpus) if gpus else 'none'})")
    if device not in ("cuda", "cuda:0") and count > 1:
        raise LaneError(f"--gpus {count} with --device {device}: the lanes choose their GPUs; "
                        f"give --device cuda (narrow with CUDA_VISIBLE_DEVICES)")
    return gpus[:count]


def lane_cores(lane: int, lanes: int, cores: Sequence[int] | None = None) -> list[int]:
    """Lane `lane`'s slice of `cores` (default: the cores this process may run on): contiguous,
    the same size for every lane (the remainder goes to the last ones), at least one core."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if lanes <= 1:
        return cores
    size, extra = divmod(len(cores), lanes)
    if size == 0:
        return [cores[lane % len(cores)]]
    begin = lane * size + max(0, lane - (lanes - extra))
    return cores[begin:begin + size + (1 if lane >= lanes - extra else 0)]


def pin_to_lane(lane: int, lanes: int) -> list[int]:
    """Confines this worker to its lane's cores (and Inductor's compile processes and torch's
    threads to their number); returns them. A no-op with one lane."""
    if lanes <= 1:
        return sorted(os.sched_getaffinity(0))
    import torch
    import torch._inductor.config as inductor_config

    cores = lane_cores(lane, lanes)
    os.sched_setaffinity(0, cores)
    inductor_config.compile_threads = len(cores)
    torch.set_num_threads(len(cores))
    return cores


def current_path(work_dir: Path, lane: int) -> Path:
    """The case lane `lane`'s worker is on (written before it starts, removed after its record)."""
    return Path(work_dir) / f"current-{lane}.json"


def claim_case(work_dir: Path, index: int, name: str, lane: int) -> bool:
    """Takes a queued case for lane `lane`'s worker; False when another lane has it."""
    folder = Path(work_dir) / MEASURE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return claim(folder, f"{index:03d}-{name}", lane)


_TIMESTAMP = re.compile(r"^(\[ *[0-9.]+s\] )")


class Measurements:
    """The measurement phase of one run: run() starts a lane per GPU (a thread each, which runs
    its workers one after another until no case is left to take), waits for them, and returns;
    interrupt() stops every worker (SIGTERM/SIGINT of the run)."""

    POLL_S = 0.5

    def __init__(self, run: _Run, pending: Sequence[tuple[int, str, str]],
                 args: argparse.Namespace, started: float, deadline: float,
                 gpus: Sequence[str | None]):
        self.run_files, self.pending = run, list(pending)
        self.args, self.started, self.deadline, self.gpus = args, started, deadline, list(gpus)
        self.folder = run.work_dir / MEASURE_DIR
        self.children: dict[int, subprocess.Popen] = {}
        self.stopping = False
        self.print_lock = threading.Lock()

    def run(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in self.folder.glob("*.claim"):  # claims of an earlier run would hold cases
            stale.unlink()
        queue = self.run_files.work_dir / "queue.json"
        queue.write_text(json.dumps(self.pending))
        lanes = [threading.Thread(target=self._lane, args=(lane, queue), name=f"lane-{lane}",
                                  daemon=True) for lane in range(len(self.gpus))]
        if len(lanes) > 1:
            _log(f"measurements: {len(lanes)} lanes (GPUs {', '.join(str(g) for g in self.gpus)}), "
                 f"{len(lane_cores(0, len(lanes)))} cores each", self.started)
        for thread in lanes:
            thread.start()
        while any(thread.is_alive() for thread in lanes):
            for thread in lanes:
                thread.join(self.POLL_S)  # short waits: the main thread takes the signals

    def interrupt(self) -> None:
        """Stops every worker now (from a signal handler: sends signals, waits for nothing)."""
        self.stopping = True
        for child in list(self.children.values()):
            if child.poll() is None:
                child.terminate()

    # ----------------------------------------------------------------------------------------

    def _unclaimed(self) -> list[tuple[int, str, str]]:
        return [(i, f, d) for i, f, d in self.pending
                if not (self.folder / f"{i:03d}-{Path(f).stem}-{d}.claim").exists()]

    def _recorded(self) -> set[int]:
        return {int(p.name.split("-", 1)[0]) for p in self.run_files.cases_dir.glob("*.json")}

    def _say(self, lane: int, line: str) -> None:
        """A worker's progress line, tagged with its GPU when there are several lanes."""
        if len(self.gpus) > 1:
            tag = f"[gpu {self.gpus[lane]}] " if self.gpus[lane] is not None else f"[lane {lane}] "
            line = _TIMESTAMP.sub(lambda m: m.group(1) + tag, line, count=1)
        with self.print_lock:
            print(line, end="", flush=True)

    def _lane(self, lane: int, queue: Path) -> None:
        """Lane `lane`: workers one after another until the queue is taken (or the run stops);
        records the case a dead worker was on as failed; gives up when a worker made no progress."""
        attempt = 0
        while not self.stopping and self._unclaimed():
            attempt += 1
            current_path(self.run_files.work_dir, lane).unlink(missing_ok=True)
            before = self._taken_by(lane)
            status, log_path = self._run_worker(lane, attempt, queue)
            if self.stopping:
                return
            self._settle_current(lane, status, log_path)
            if self._taken_by(lane) == before and self._unclaimed():
                _log(f"lane {lane}: its worker took no case (exit {status}; see {log_path}); "
                     f"this lane stops, the others go on", self.started)
                return

    def _taken_by(self, lane: int) -> int:
        """How many cases lane `lane`'s workers took so far."""
        return sum(1 for path in self.folder.glob("*.claim")
                   if (load_json(path) or {}).get("worker") == lane)

    def _run_worker(self, lane: int, attempt: int, queue: Path) -> tuple[int, Path]:
        env = dict(os.environ, PYTHONFAULTHANDLER="1")  # a crash in native code leaves its Python stack
        gpu = self.gpus[lane]
        if gpu is not None and len(self.gpus) > 1:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        log_path = self.folder / f"worker-{lane}-{attempt}.log"
        argv = [sys.executable, "-m", "fact.conformance", "--worker", "--queue", str(queue),
                "--started", str(self.started), "--deadline", str(self.deadline),
                *self.args.passed, "--lane", str(lane), "--lanes", str(len(self.gpus))]
        if gpu is not None:
            argv += ["--gpu-name", gpu]
        with open(log_path, "w") as log:
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, env=env)
            self.children[lane] = child
            if self.stopping:  # stopped while it was starting
                child.terminate()
            for line in child.stdout:
                log.write(line)
                log.flush()
                if line.startswith("[") or line.startswith("plot:"):
                    self._say(lane, line)
            return child.wait(), log_path

    def _settle_current(self, lane: int, status: int, log_path: Path) -> None:
        """The case lane `lane`'s worker was on when it ended without recording it: failed."""
        current = load_json(current_path(self.run_files.work_dir, lane))
        if current is None or current["index"] in self._recorded():
            return
        index = current["index"]
        stem, dtype_name = next((Path(f).stem, d) for i, f, d in self.pending if i == index)
        tail = log_path.read_text(errors="replace").splitlines()[-40:]  # a faulthandler traceback fits
        record = case_record(stem, dtype_name, "failed", f"the worker process died during it (exit {status})",
                             log_tail=tail)
        if self.gpus[lane] is not None:
            record["gpu"] = self.gpus[lane]
        self.run_files.record(index, with_prepare_record(record, self.run_files.work_dir))
        current_path(self.run_files.work_dir, lane).unlink(missing_ok=True)
        _log(f"{current['name']}: FAILED: the worker died (exit {status})", self.started)


def resumed_records(previous: dict, pending: Sequence[tuple[int, str, str]],
                    remeasure: Sequence[str] = ()) -> dict[int, dict]:
    """--resume: queue index -> the earlier results file's record of that case, for the cases
    it measured (status ok or wrong); those are not measured again. Failed and skipped cases
    are measured again, and those `remeasure` names (a case name "stem-dtype", or a stem: all
    its dtypes)."""
    again = set(remeasure)
    by_name = {case.get("name"): case for case in previous.get("cases", [])
               if case.get("status") in ("ok", "wrong") and case.get("name") not in again
               and str(case.get("name")).rsplit("-", 1)[0] not in again}
    kept = {}
    for index, file, dtype_name in pending:
        case = by_name.get(f"{Path(file).stem}-{dtype_name}")
        if case is not None:
            kept[index] = dict(case, resumed_from=f"{previous.get('device')} {previous.get('date')}")
    return kept


def check_resumable(previous: dict, path: Path) -> None:
    """Raises LaneError when `path` is not a conformance results file."""
    if previous.get("suite") != "conformance" or not isinstance(previous.get("cases"), list):
        raise LaneError(f"--resume {path}: not a conformance results file")


def write_device(work_dir: Path, device: str) -> None:
    """device.json of the run, from the first worker that gets to it (every lane's GPU is of the
    same kind on the machines this runs on; a lane on another kind is noted in its records)."""
    path = Path(work_dir) / "device.json"
    if load_json(path):
        return
    import torch

    from fact.versions import collect_versions

    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        doc = {"device": torch.cuda.get_device_name(index),
               "versions": collect_versions(torch.device("cuda", index))}
    else:
        doc = {"device": "cpu", "versions": collect_versions(torch.device("cpu"))}
    write_json(path, doc)
