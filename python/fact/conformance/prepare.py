"""The prepare phase: the compile caches warmed in parallel before the serial measurements

A case spends most of its minutes in CPU work that needs no quiet GPU: nvcc compiling CUTLASS
kernels (one process per kernel), torch.export, and Inductor (the composed module's remainder,
the never-slower guard's torch.compile of the original, the torch.compile baseline). Before
the serial measurements, --prepare-jobs worker processes run that work for the queued cases,
in queue order, timing nothing (prepare_gpu_case), so that the measurement of each case finds
it in the caches the two phases share:

- the FACT kernel cache (<FACT cache root>/kernels: entries keyed by the rendered source and
  compile command, built under per-key file locks, so concurrent builds are safe). Prepare
  runs fact.optimize with the measurement's --tune against a scratch copy of the tuning
  database (scratch_tuning_db): it compiles the same tuning candidates (a kernel space's
  spread selection is deterministic) or the same stored choices, and its tuning runs on the
  shared GPU store their choice in the copy only. The measurement then finds every candidate
  built, times them itself on the quiet GPU and stores its choice in the real database.
- Inductor's FX graph and AOTAutograd caches and the Triton kernels under
  TORCHINDUCTOR_CACHE_DIR (share_compile_caches: one folder for every process): torch.compile
  of the original (the guard and the baseline compile the same graph) is served whole. The
  composed module's remainder graph carries fact::launch call numbers, which count the calls a
  process registered so far (fact.ops.register_call): its FX graph misses unless both
  processes registered the same calls before it, and only its Triton kernels (cached by their
  source) are reused. Prepare workers do not store Triton launch-configuration benchmarks
  (autotune_local_cache off: they ran on a shared GPU); the measurement benchmarks and stores.

What the measurement still does itself: torch.export capture, dynamo tracing, Inductor's
lowering of the remainder, the tuning runs, the verification and the timing. A prepare that
fails or is stopped costs nothing but its time: the measurement runs the case in full.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from fact.conformance.corpus import (PRECISION_BY_DTYPE, _first_line, build_case, load_json,
                                     quiet_torch, write_json)
from fact.conformance.gpu_case import WORKER_LOST_EXIT, _log

if TYPE_CHECKING:
    from fact.conformance.run_files import _Run


PREPARE_DIR = "prepare"              # under the work dir: queue, claims, records, worker logs
PREPARE_BUDGET_SHARE = 0.45          # default --prepare-budget: this share of --time-budget
PREPARE_GPU_MEMORY_SHARE = 0.9       # of the GPU's memory, split evenly over the prepare workers


def available_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_prepare_jobs(device: str, gpus: int = 1) -> int:
    """--prepare-jobs' default: none on the CPU (a smoke test), else half the cores, at most 8
    per GPU (each worker's nvcc and Inductor compiles get two cores of a 16-core machine)."""
    if not device.startswith("cuda"):
        return 0
    return max(1, min(8 * max(1, gpus), available_cores() // 2))


# --------------------------------------------------------------------------------------------
# The caches the two phases share


def share_compile_caches() -> None:
    """Points Inductor's on-disk caches (FX graphs, AOTAutograd, Triton kernels) at one folder
    for this process and every worker it starts (they inherit the environment): the
    $TORCHINDUCTOR_CACHE_DIR given, else <FACT cache root>/inductor, kept with the kernel cache
    (a later run with the same FACT_CACHE_DIR reuses both). Torch writes its default
    (/tmp/torchinductor_<user>) into the environment on first use: that one counts as not given."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not given or given == default_cache_dir():
        from fact.native import cache_root

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor")


def shared_caches() -> dict:
    """Where the caches both phases use live, and whether Inductor's are on (the results'
    settings)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from fact.native import cache_root

    return {"fact_cache_root": str(cache_root()),
            "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "torch's default"),
            "fx_graph_cache": bool(inductor_config.fx_graph_cache),
            "autograd_cache": bool(functorch_config.enable_autograd_cache)}


def kernel_cache_entries() -> int:
    """The entries (built or failed kernels) in the FACT kernel cache, every process's."""
    from fact.native import cache_root

    try:
        with os.scandir(cache_root() / "kernels") as entries:
            return sum(1 for e in entries if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return 0


def cache_counters() -> dict:
    """This process's Inductor FX graph and AOTAutograd cache hits and misses so far, and the
    kernel cache's entries (kernel_cache_entries)."""
    from torch._dynamo.utils import counters

    return {"fx_graph_hits": counters["inductor"]["fxgraph_cache_hit"],
            "fx_graph_misses": counters["inductor"]["fxgraph_cache_miss"],
            "autograd_hits": counters["aot_autograd"]["autograd_cache_hit"],
            "autograd_misses": counters["aot_autograd"]["autograd_cache_miss"],
            "kernel_cache_entries": kernel_cache_entries()}


def cache_activity(before: dict, after: dict) -> dict:
    """What the caches did between two cache_counters: the FX graph and AOTAutograd hits and
    misses of this process, and `kernels_built`, the kernel cache entries added meanwhile (by
    any process: exact while no other process builds, as in the serial phase)."""
    delta = {key: after[key] - before[key] for key in after}
    delta["kernels_built"] = delta.pop("kernel_cache_entries")
    return delta


def prepare_record_path(work_dir: Path, name: str) -> Path:
    return Path(work_dir) / PREPARE_DIR / f"{name}.json"


def with_prepare_record(case: dict, work_dir: Path) -> dict:
    """The case with what its prepare recorded, when it was prepared: `seconds.prepare` (its
    wall seconds) and, when the prepare failed or was stopped, `prepare_error`."""
    record = load_json(prepare_record_path(work_dir, case["name"]))
    if record is None:
        return case
    case.setdefault("seconds", {})["prepare"] = record.get("seconds")
    if record.get("status") != "ok":
        case["prepare_error"] = record.get("error") or record.get("status")
    return case


def scratch_tuning_db(folder: Path) -> Path:
    """A copy of the tuning database (<FACT cache root>/tuning_db.json, where there is one) in
    `folder`: the prepare's tuning reads the same stored choices as the measurement's and
    stores what it tunes on the shared GPU there, never in the real database."""
    from fact.native import cache_root

    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / "tuning_db.json"
    real = cache_root() / "tuning_db.json"
    if real.is_file():
        shutil.copyfile(real, scratch)
    return scratch


# --------------------------------------------------------------------------------------------
# One case, and a prepare worker


def prepare_gpu_case(path: Path, dtype_name: str, case_dir: Path, *, device: str = "cuda",
                     sizes: str = "full", tune: int = 2, compile_jobs: int = 0,
                     seed: int = 0) -> dict:
    """Warms the caches run_gpu_case reads for one (corpus file, dtype), timing nothing: builds
    the model as run_gpu_case does (same sizes, device and seed); fact.optimize with the same
    `tune` and the Inductor remainder, but without the never-slower guard, against a scratch
    copy of the tuning database (scratch_tuning_db) and with `compile_jobs` parallel kernel
    compiles, in case_dir/plan; runs the composed module once; runs torch.compile of the
    original once (the graph the guard and the baseline compile). Never raises: a step that
    raises is recorded in `errors` and the later steps run where they can. Returns the record:
    name, status ("ok" or "failed" with `error`), seconds (wall), steps (seconds per step),
    what fact.optimize composed, and the cache activity (cache_activity)."""
    from fact.compose import optimize

    precision = PRECISION_BY_DTYPE[dtype_name]
    record: dict = {"name": f"{path.stem}-{dtype_name}", "model": path.stem, "dtype": dtype_name,
                    "precision": precision, "status": "ok", "steps": {}, "errors": {}}
    clock = time.perf_counter()
    before = cache_counters()

    def step(name: str, action: Callable[[], Any]) -> Any:
        begun = time.perf_counter()
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - recorded; the measurement runs the case anyway
            record["errors"][name] = _first_line(error)
            return None
        finally:
            record["steps"][name] = round(time.perf_counter() - begun, 3)

    def build_model():
        return build_case(path, dtype_name, device, sizes, seed)[1:]

    def optimize_model(model, inputs):
        with quiet_torch():
            return optimize(model, inputs, precision, work_dir=case_dir / "plan", tune=tune,
                            remainder="inductor", speed_guard=False,
                            tuning_db=scratch_tuning_db(case_dir), compile_jobs=compile_jobs)

    def run_once(fn, inputs):
        with quiet_torch(), torch.no_grad():
            fn(*inputs)

    built = step("build", build_model)
    if built is not None:
        model, inputs = built
        composed = step("optimize", lambda: optimize_model(model, inputs))
        if composed is not None:
            report = composed.fact_report
            record.update(composed=len(report.composed), runs=report.runs, remainder=report.remainder)
            step("run_composed", lambda: run_once(composed, inputs))
        step("torch_compile", lambda: run_once(torch.compile(model, dynamic=False), inputs))
    record["seconds"] = round(time.perf_counter() - clock, 3)
    record["caches"] = cache_activity(before, cache_counters())
    if record["errors"]:
        record["status"] = "failed"
        record["error"] = "; ".join(f"{name}: {text}" for name, text in record["errors"].items())
    return record


def claim(folder: Path, name: str, worker: int) -> bool:
    """Takes a case for a worker (of the prepare phase, or a measurement lane): links
    <name>.claim into place in `folder` (one of the workers that try wins) holding the worker's
    number, pid and the time."""
    target = folder / f"{name}.claim"
    draft = folder / f".{name}.{os.getpid()}.claim"
    draft.write_text(json.dumps({"worker": worker, "pid": os.getpid(), "at": time.time()}))
    try:
        os.link(draft, target)
        return True
    except FileExistsError:
        return False
    finally:
        draft.unlink(missing_ok=True)


def _end_with_the_driver() -> None:
    """A prepare worker leads its own process group (_PreparePhase starts it in a new session,
    so that stopping it reaches its nvcc, ninja and Inductor compile processes): on SIGTERM,
    which the kernel also sends when the driver dies (PR_SET_PDEATHSIG, Linux), it kills that
    group, itself included."""
    def end_group(signum, frame):  # noqa: ARG001
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, end_group)
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    except (OSError, AttributeError):
        pass  # not Linux: the driver's stop() still kills the group


def _share_machine(device: str, jobs: int, gpus: int = 1) -> int:
    """Sets this prepare worker's share of the machine, one of `jobs` spread over `gpus` GPUs:
    Inductor compile processes and kernel compiles (returned) of cores / jobs, at most
    PREPARE_GPU_MEMORY_SHARE / (its GPU's share of the jobs) of the GPU's memory (the caching
    allocator raises past it:
    that case's prepare fails, the others go on; the corpus' largest cases need a few GB at full
    size). Triton launch-configuration benchmarks are not stored (autotune_local_cache: they
    ran on a shared GPU)."""
    import torch._inductor.config as inductor_config

    cores = max(1, available_cores() // jobs)
    inductor_config.compile_threads = cores
    inductor_config.autotune_local_cache = False
    if device.startswith("cuda"):
        per_gpu = -(-jobs // max(1, gpus))
        torch.cuda.set_per_process_memory_fraction(min(1.0, PREPARE_GPU_MEMORY_SHARE / per_gpu),
                                                   torch.device(device).index or 0)
    return cores


def _release_case_memory(device: str) -> bool:
    """Frees what the last case left (compiled graphs, cached GPU blocks); False when the CUDA
    context is unusable (a fresh process has to go on)."""
    torch._dynamo.reset()
    gc.collect()
    if device.startswith("cuda"):
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - a sticky CUDA error
            return False
    return True


def _prepare_worker(args: argparse.Namespace) -> int:
    """A prepare worker (_PreparePhase starts them): takes the queued cases in order that no
    other worker took, until none is left or the prepare deadline has passed, prepares each
    (prepare_gpu_case) and writes its record. Output goes to its log only; the driver reports
    the records."""
    _end_with_the_driver()
    compile_jobs = _share_machine(args.device, max(1, args.prepare_jobs), args.lanes)
    prepare_dir = Path(args.work_dir) / PREPARE_DIR
    started = args.started or time.time()
    for _index, file, dtype_name in json.loads(Path(args.queue).read_text()):
        if args.prepare_deadline and time.time() >= args.prepare_deadline:
            break
        path = Path(file)
        name = f"{path.stem}-{dtype_name}"
        if not claim(prepare_dir, name, args.worker_number):
            continue
        print(f"[{time.time() - started:7.1f}s] prepare {name}", flush=True)
        record = prepare_gpu_case(path, dtype_name, prepare_dir / name, device=args.device,
                                  sizes=args.sizes, tune=args.tune, compile_jobs=compile_jobs)
        record["worker"] = args.worker_number
        write_json(prepare_record_path(args.work_dir, name), record)
        print(f"[{time.time() - started:7.1f}s] {name}: {record['status']} in "
              f"{record['seconds']:.1f} s {record.get('error', '')}", flush=True)
        if not _release_case_memory(args.device):
            return WORKER_LOST_EXIT
    return 0


# --------------------------------------------------------------------------------------------
# The phase: the workers of one run


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to the process group a prepare worker leads (itself, its compilers)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _PreparePhase:
    """The prepare workers of one run (see "The prepare phase" above). run() starts
    --prepare-jobs workers over the queued cases, reports each case's record as it appears,
    replaces a worker that died (the case it was on gets a failed record), and ends when the
    workers have taken every case or at the deadline, where it kills those still working (their
    cases get "stopped" records). interrupt() kills them at once (SIGTERM/SIGINT of the run)."""

    POLL_S = 0.5

    def __init__(self, run: _Run, pending: Sequence[tuple[int, str, str]],
                 args: argparse.Namespace, started: float, deadline: float,
                 gpus: Sequence[str | None] = (None,)):
        self.folder = run.work_dir / PREPARE_DIR
        self.pending = list(pending)
        self.names = {f"{Path(f).stem}-{d}": (Path(f).stem, d) for _, f, d in self.pending}
        self.args, self.started, self.deadline = args, started, deadline
        self.workers: dict[int, subprocess.Popen] = {}
        self.stop_reason = "the prepare budget ran out during it"
        self.reported: set[str] = set()
        self.began = self.ended = 0.0
        self.compile_jobs = max(1, available_cores() // max(1, args.prepare_jobs))
        # worker n runs on GPU gpus[(n - 1) % len(gpus)] (CUDA_VISIBLE_DEVICES) with several
        self.gpus = list(gpus) if len([g for g in gpus if g is not None]) > 1 else []

    def run(self) -> None:
        self.began = time.time()
        shutil.rmtree(self.folder, ignore_errors=True)  # claims of an earlier run would hold cases
        self.folder.mkdir(parents=True)
        (self.folder / "queue.json").write_text(json.dumps(self.pending))
        count = min(self.args.prepare_jobs, len(self.pending))
        budget = f"until {self.deadline - self.started:.0f} s" if self.deadline else "no time limit"
        _log(f"prepare: {count} workers over {len(self.pending)} cases ({budget}; "
             f"{self.compile_jobs} cores each)", self.started)
        try:
            for _ in range(count):
                self._start_worker()
            while self.workers:
                self._report_records()
                self._reap_workers()
                if self.deadline and time.time() >= self.deadline and self.workers:
                    _log(f"prepare: budget spent, stopping {len(self.workers)} workers", self.started)
                    break
                time.sleep(self.POLL_S)
        finally:
            self._stop_workers()
            self._report_records()
            self.ended = time.time()
        summary = self.summary()
        _log(f"prepare: {summary['prepared']} of {len(self.pending)} cases prepared "
             f"({summary['failed']} failed, {summary['stopped']} stopped, "
             f"{summary['not_started']} not started) in {summary['wall_s']:.0f} s", self.started)

    def interrupt(self) -> None:
        """Kills every worker now (from a signal handler: sends signals, waits for nothing)."""
        self.stop_reason = "the run was stopped during it"
        for process in list(self.workers.values()):
            _kill_group(process)

    def summary(self) -> dict:
        """For the results' settings: the workers, the budget, and how many cases were
        prepared, failed, stopped or not started."""
        statuses = [(load_json(prepare_record_path(self.folder.parent, name)) or {}).get("status")
                    for name in self.names]
        return {"jobs": self.args.prepare_jobs, "budget_s": self.args.prepare_budget,
                "gpus": len(self.gpus) or 1,
                "compile_jobs_per_worker": self.compile_jobs,
                "wall_s": round((self.ended or time.time()) - self.began, 1),
                "prepared": statuses.count("ok"), "failed": statuses.count("failed"),
                "stopped": statuses.count("stopped"), "not_started": statuses.count(None)}

    def _start_worker(self) -> None:
        number = max(self.workers, default=0) + 1
        while (self.folder / f"worker-{number}.log").exists():
            number += 1
        argv = [sys.executable, "-m", "fact.conformance", "--prepare-worker",
                "--queue", str(self.folder / "queue.json"), "--started", str(self.started),
                "--prepare-deadline", str(self.deadline), "--worker-number", str(number),
                *self.args.passed, "--prepare-jobs", str(self.args.prepare_jobs),
                "--lanes", str(max(1, len(self.gpus)))]
        env = dict(os.environ)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[(number - 1) % len(self.gpus)]
        with open(self.folder / f"worker-{number}.log", "w") as log:
            self.workers[number] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                                    env=env)

    def _reap_workers(self) -> None:
        """Settles the workers that exited: the case a dead one was on gets a failed record; a
        fresh worker replaces one that stopped early while cases are left, unless it took
        none (it would fail again)."""
        for number, process in list(self.workers.items()):
            status = process.poll()
            if status is None:
                continue
            del self.workers[number]
            if status == 0:
                continue
            self._settle_claims(number, "failed", f"the prepare worker died during it (exit {status})")
            took_a_case = any(claim.get("worker") == number for claim in self._claims().values())
            if not took_a_case:
                _log(f"prepare worker {number} exited ({status}) before taking a case; see "
                     f"{self.folder / f'worker-{number}.log'}", self.started)
            elif self._unclaimed() and not (self.deadline and time.time() >= self.deadline):
                self._start_worker()

    def _stop_workers(self) -> None:
        for process in self.workers.values():
            _kill_group(process)
        for number, process in self.workers.items():
            process.wait()
            self._settle_claims(number, "stopped", self.stop_reason)
        self.workers.clear()

    def _claims(self) -> dict[str, dict]:
        return {name: load_json(self.folder / f"{name}.claim") or {} for name in self.names
                if (self.folder / f"{name}.claim").is_file()}

    def _unclaimed(self) -> list[str]:
        return [name for name in self.names if not (self.folder / f"{name}.claim").exists()]

    def _settle_claims(self, number: int, status: str, reason: str) -> None:
        """Records the cases worker `number` took and left without a record."""
        log = self.folder / f"worker-{number}.log"
        for name, claim in self._claims().items():
            path = prepare_record_path(self.folder.parent, name)
            if claim.get("worker") != number or path.exists():
                continue
            stem, dtype_name = self.names[name]
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
            write_json(path, {"name": name, "model": stem, "dtype": dtype_name, "status": status,
                              "error": reason, "worker": number,
                              "seconds": round(time.time() - claim.get("at", time.time()), 3),
                              "log_tail": tail})

    def _report_records(self) -> None:
        """A progress line for each record that appeared since the last call."""
        for name in self.names:
            if name in self.reported:
                continue
            record = load_json(prepare_record_path(self.folder.parent, name))
            if record is None:
                continue
            self.reported.add(name)
            seconds, worker = record.get("seconds") or 0.0, record.get("worker")
            if record.get("status") == "ok":
                steps = record.get("steps", {})
                _log(f"prepared {name} in {seconds:.1f} s (worker {worker}: optimize "
                     f"{steps.get('optimize', 0):.1f} s, torch.compile "
                     f"{steps.get('torch_compile', 0):.1f} s; {record.get('composed', 0)} composed)",
                     self.started)
            else:
                _log(f"prepare {name}: {record.get('status', '?').upper()} after {seconds:.1f} s "
                     f"(worker {worker}): {record.get('error', '')}", self.started)
