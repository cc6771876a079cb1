"""The gates every kernel library passes before it joins a plan or the registry, whoever wrote it
(docs/architecture.md, "Every kernel passes the same gates"; docs/agent.md, "The gates").

A kernel library (built by the engine: fact_engine_build) implements one call of the kernel C
ABI — the argument image of an agent task or plan call, its pointer slots, operands and results
(docs/plan.md). `run_gates` checks it against the call's reference semantics (the captured
fragment, fact.agent.fragment) in float64:

  load                      the library loads; fact_kernel_info names the call's kind, ABI
                            version 2 and the device it was built for; the entry exists
  workspace_query           the size query answers FACT_OK
  status                    the call answers FACT_OK
  completes_on_return       every result is final when the call returns (CPU: unchanged 50 ms
                            later — no work left on another thread; GPU: complete once the given
                            stream is synchronized — no work on another stream)
  inputs_unchanged          every input is bitwise what it was before the call
  guard_bands               the bytes around every input and result are untouched
  poisoned_outputs_written  no result element still holds the poison written before the call
                            (an output left to a freed buffer's old contents is never correct:
                            the buffers are fresh and poisoned, and no reference result exists
                            in memory while the kernel runs — the reference is computed after,
                            in another process)
  finite_outputs            no NaN or infinity (no NaN wildcards)
  float64_reference         ||out - ref|| / ||ref|| <= the call's tolerance, ref = the fragment
                            run by PyTorch in float64 on the same inputs (worst element: index,
                            value, reference, magnitude)
  repoison_rerun            the same call again on the same buffers, re-poisoned: written again,
                            and right (no "written once" laziness)
  new_inputs_new_results    new input values in the same buffers: the results follow them (no
                            cached results)
  other_stream              fresh buffers (other addresses), called on another stream (GPU) /
                            another thread (CPU): still right
  timing                    FACT's timer (fact.timing: CUDA events with L2 flushed on a GPU,
                            perf_counter on the CPU), median of many runs, with the same-run
                            baseline: the fragment run by PyTorch in the model's dtype

The library runs only in a child process (`python -m fact.agent.gates --child`) with a time
limit: a crash or a hang fails the gates ("crash" / "time_limit") and costs the caller nothing
more. The child returns raw tensors; the parent computes the references and every numeric
comparison, so nothing the kernel does in its own process can touch them.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from fact.agent.fragment import Fragment, random_inputs

GUARD_BYTES = 256
SETTLE_SECONDS = 0.05
CHECK_ORDER = ("load", "workspace_query", "status", "completes_on_return", "inputs_unchanged",
               "guard_bands", "poisoned_outputs_written", "finite_outputs", "float64_reference",
               "repoison_rerun", "new_inputs_new_results", "other_stream", "timing")

# Poison: a quiet NaN with a payload no arithmetic produces (a NaN the kernel writes has the
# default payload), so "not written" and "wrote NaN" are told apart.
POISON_BITS = {torch.float32: (torch.int32, 0x7FC5A5A5), torch.float64: (torch.int64, 0x7FF8A5A5A5A5A5A5),
               torch.float16: (torch.int16, 0x7E5A), torch.bfloat16: (torch.int16, 0x7FE5)}
GUARD_BYTE = 0xA5


@dataclass
class Check:
    name: str
    passed: bool
    detail: str = ""
    data: dict = field(default_factory=dict)


@dataclass
class GateReport:
    passed: bool
    checks: list = field(default_factory=list)     # Check as dicts, in CHECK_ORDER
    failed_check: str = ""                          # the first check that failed
    failure: str = ""                               # its detail
    rel_err: float | None = None
    tolerance: float | None = None
    timing: dict = field(default_factory=dict)      # ms, baseline_ms, speedup, timer
    device: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# The child: loads the library, runs the calls, returns raw tensors


def _guarded(nbytes: int, device: str) -> torch.Tensor:
    """A fresh allocation: GUARD_BYTES of guard, `nbytes` of tensor, GUARD_BYTES of guard."""
    return torch.full((nbytes + 2 * GUARD_BYTES,), GUARD_BYTE, dtype=torch.uint8, device=device)


def _extent_bytes(shape, stride, dtype) -> int:
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0)
    if any(s == 0 for s in shape):
        extent = 0
    return max(extent, 1) * torch.empty((), dtype=dtype).element_size()


def _view(base: torch.Tensor, shape, stride, dtype) -> torch.Tensor:
    region = base[GUARD_BYTES:base.numel() - GUARD_BYTES].view(dtype)
    return region.as_strided(tuple(shape), tuple(stride), region.storage_offset())


def _poison_value(dtype: torch.dtype) -> tuple[torch.dtype, int]:
    """(integer dtype of the same width, the poison's bits as a signed value of it)."""
    int_dtype, bits = POISON_BITS[dtype]
    width = 8 * torch.empty((), dtype=int_dtype).element_size()
    return int_dtype, bits - (1 << width) if bits >= 1 << (width - 1) else bits


def _poison(base: torch.Tensor, dtype: torch.dtype) -> None:
    region = base[GUARD_BYTES:base.numel() - GUARD_BYTES]
    if dtype in POISON_BITS:
        int_dtype, signed = _poison_value(dtype)
        region.view(int_dtype).fill_(signed)
    else:
        region.fill_(GUARD_BYTE)


class _Buffers:
    """Inputs and results of one call, each in its own guarded allocation."""

    def __init__(self, call: dict, values: dict, device: str):
        self.device = device
        self.inputs, self.input_bases, self.outputs, self.output_bases = [], [], [], []
        for operand in call["operands"]:
            dtype = _dtype(operand["dtype"])
            base = _guarded(_extent_bytes(operand["shape"], operand["stride"], dtype), device)
            view = _view(base, operand["shape"], operand["stride"], dtype)
            view.copy_(values[operand["value"]].to(device))
            self.inputs.append(view)
            self.input_bases.append(base)
        for result in call["results"]:
            dtype = _dtype(result["dtype"])
            base = _guarded(_extent_bytes(result["shape"], result["stride"], dtype), device)
            self.outputs.append(_view(base, result["shape"], result["stride"], dtype))
            self.output_bases.append(base)
        self.poison()

    def poison(self) -> None:
        for base, out in zip(self.output_bases, self.outputs):
            _poison(base, out.dtype)

    def load_inputs(self, call: dict, values: dict) -> None:
        for view, operand in zip(self.inputs, call["operands"]):
            view.copy_(values[operand["value"]].to(self.device))


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name}")
    return dtype


def _image(call: dict, buffers: _Buffers) -> ctypes.Array:
    image = bytes.fromhex(call["args"]["hex"])
    buffer = (ctypes.c_uint64 * ((len(image) + 7) // 8))()
    ctypes.memmove(buffer, image, len(image))
    for slot in call["args"]["pointers"]:
        tensor = buffers.outputs[slot["index"]] if slot["from"] == "result" else buffers.inputs[slot["index"]]
        address = tensor.data_ptr() + int(slot.get("element_offset", 0)) * tensor.element_size()
        struct.pack_into("<Q", buffer, int(slot["offset"]), address)
    return buffer


def _child_run(library, call: dict, buffers: _Buffers, stream: Any, thread: bool, cuda: bool) -> dict:
    """One call; the raw facts the parent judges."""
    image = _image(call, buffers)
    before_inputs = [b.clone() for b in buffers.input_bases]
    size = library.workspace_size(ctypes.addressof(image))
    workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=buffers.device) if size else None
    status = [None]

    def launch():
        handle = stream.cuda_stream if stream is not None else 0
        status[0] = library.launch(ctypes.addressof(image), workspace.data_ptr() if workspace is not None else None,
                                   handle)

    if thread:
        worker = threading.Thread(target=launch)
        worker.start()
        worker.join()
    else:
        launch()
    if cuda:
        (stream or torch.cuda.current_stream()).synchronize()
    at_return = [b.clone() for b in buffers.output_bases]
    if cuda:
        torch.cuda.synchronize()
    time.sleep(SETTLE_SECONDS)
    later = [b.clone() for b in buffers.output_bases]
    return {
        "status": status[0],
        "workspace": size,
        "changed_after_return": [not torch.equal(a, b) for a, b in zip(at_return, later)],
        "inputs_changed": [not torch.equal(a[GUARD_BYTES:-GUARD_BYTES], b[GUARD_BYTES:-GUARD_BYTES])
                           for a, b in zip(before_inputs, [x.clone() for x in buffers.input_bases])],
        "guards_touched": [bool((torch.cat([b[:GUARD_BYTES], b[-GUARD_BYTES:]]) != GUARD_BYTE).any())
                           for b in [*buffers.input_bases, *buffers.output_bases]],
        "outputs": [o.detach().to("cpu").clone() for o in buffers.outputs],
        "poisoned": [_count_poison(o) for o in buffers.outputs],
    }


def _count_poison(t: torch.Tensor) -> list:
    """[count of elements still holding the poison, flat index of the first or -1]."""
    if t.dtype not in POISON_BITS:
        return [0, -1]
    int_dtype, signed = _poison_value(t.dtype)
    mask = (t.contiguous().view(int_dtype) == signed).reshape(-1).cpu()
    count = int(mask.sum())
    return [count, int(mask.nonzero()[0]) if count else -1]


def child_main(request_path: str, result_path: str) -> int:
    from fact import kernels, timing
    request = json.loads(Path(request_path).read_text())
    values = torch.load(request["values"])
    call = request["call"]
    device = request.get("device", "cpu")
    cuda = device.startswith("cuda")
    out: dict[str, Any] = {"runs": {}}
    try:
        library = kernels.KernelLibrary(request["library"])
    except Exception as error:  # noqa: BLE001 - reported as the "load" check
        out["load_error"] = f"{type(error).__name__}: {error}"
        torch.save(out, result_path)
        return 0
    out["info"] = library.info
    try:
        first = _Buffers(call, values["a"], device)
        out["runs"]["first"] = _child_run(library, call, first, None, False, cuda)
        first.poison()
        first.load_inputs(call, values["a"])
        out["runs"]["repoison"] = _child_run(library, call, first, None, False, cuda)
        first.poison()
        first.load_inputs(call, values["b"])
        out["runs"]["new_inputs"] = _child_run(library, call, first, None, False, cuda)
        other = _Buffers(call, values["c"], device)
        stream = torch.cuda.Stream() if cuda else None
        out["runs"]["other_stream"] = _child_run(library, call, other, stream, not cuda, cuda)
        if request.get("timing", True) and out["runs"]["first"]["status"] == 0:
            first.load_inputs(call, values["a"])
            image = _image(call, first)
            size = library.workspace_size(ctypes.addressof(image))
            workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=device) if size else None
            handle = torch.cuda.current_stream().cuda_stream if cuda else 0

            def kernel():
                library.launch(ctypes.addressof(image), workspace.data_ptr() if workspace is not None else None, handle)

            fragment = Fragment(request["fragment"])
            native = {spec.id: t for spec, t in zip(fragment.inputs, first.inputs)}

            def baseline():
                fragment.run(native, widen=False)

            iters = int(request.get("iters", 20))
            if cuda:
                flusher = timing.L2Flusher(int(request.get("flush_mb", 256)), torch.device(device))
                measured = timing.time_cuda(kernel, 3, iters, flusher)
                base = timing.time_cuda(baseline, 3, iters, flusher)
            else:
                measured = timing.time_cpu(kernel, 2, iters)
                base = timing.time_cpu(baseline, 2, iters)
            out["timing"] = {"ms": measured.median_ms, "spread_ms": [measured.p10_ms, measured.p90_ms],
                             "baseline": "PyTorch (the replaced subgraph, eager, same process, same inputs)",
                             "baseline_ms": base.median_ms, "speedup": base.median_ms / measured.median_ms
                             if measured.median_ms > 0 else None, "timer": measured.timer}
    except Exception as error:  # noqa: BLE001 - the harness's own failure is reported, not raised
        out["harness_error"] = f"{type(error).__name__}: {error}"
    torch.save(out, result_path)
    return 0


# --------------------------------------------------------------------------------------------
# The parent: inputs, the child, the references and the verdict


def _compare(got: torch.Tensor, want: torch.Tensor, tolerance: float) -> tuple[float, dict]:
    want = want.to(torch.float64).cpu()
    have = got.to(torch.float64).cpu()
    diff = (have - want).abs()
    norm = float(torch.linalg.vector_norm(want))
    rel = float(torch.linalg.vector_norm(have - want)) / norm if norm > 0 else float(torch.linalg.vector_norm(have - want))
    flat = int(torch.argmax(diff.reshape(-1))) if diff.numel() else 0
    index = list(torch.unravel_index(torch.tensor(flat), tuple(want.shape))) if want.dim() else []
    where = {"index": [int(i) for i in index], "value": float(have.reshape(-1)[flat]) if have.numel() else None,
             "reference": float(want.reshape(-1)[flat]) if want.numel() else None,
             "magnitude": float(diff.reshape(-1)[flat]) if diff.numel() else 0.0,
             "rel_err": rel, "tolerance": tolerance}
    return rel, where


def _index_of(flat: int, shape) -> list:
    if flat < 0 or not shape:
        return []
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))]


def _judge_run(run: dict, references: list, names: list, tolerance: float, label: str) -> list[Check]:
    """Checks of one run: status, completion, inputs, guards, poison, finiteness, reference."""
    checks = []
    status = run.get("status")
    checks.append(Check("status", status == 0, "" if status == 0 else
                        f"{label}: the call returned {status} ({_status_name(status)})"))
    changed = [n for n, c in zip(names, run["changed_after_return"]) if c]
    checks.append(Check("completes_on_return", not changed, "" if not changed else
                        f"{label}: result {', '.join(changed)} changed after the call returned (work left "
                        f"running on another thread or stream: results must be final when the call "
                        f"returns / its stream is synchronized)"))
    mutated = [i for i, c in enumerate(run["inputs_changed"]) if c]
    checks.append(Check("inputs_unchanged", not mutated, "" if not mutated else
                        f"{label}: operand(s) {', '.join(str(i) for i in mutated)} were written by the kernel"))
    touched = [i for i, c in enumerate(run["guards_touched"]) if c]
    checks.append(Check("guard_bands", not touched, "" if not touched else
                        f"{label}: bytes outside tensor(s) {', '.join(str(i) for i in touched)} were written "
                        f"(out of bounds)"))
    unwritten = []
    for name, (count, first), out in zip(names, run["poisoned"], run["outputs"]):
        if count:
            unwritten.append(f"{name}: {count} of {out.numel()} elements not written (first at index "
                             f"{_index_of(first, out.shape)})")
    checks.append(Check("poisoned_outputs_written", not unwritten, "" if not unwritten else f"{label}: " + "; ".join(unwritten),
                        {"unwritten": unwritten}))
    nonfinite = []
    for name, out, (count, _) in zip(names, run["outputs"], run["poisoned"]):
        if out.is_floating_point():
            bad = ~torch.isfinite(out.to(torch.float64))
            extra = int(bad.sum()) - count
            if extra > 0:
                flat = int(bad.reshape(-1).nonzero()[0])
                nonfinite.append(f"{name}: {extra} NaN/inf element(s) written (first at index {_index_of(flat, out.shape)})")
    checks.append(Check("finite_outputs", not nonfinite, "" if not nonfinite else f"{label}: " + "; ".join(nonfinite)))
    worst = None
    failures = []
    for name, out, want in zip(names, run["outputs"], references):
        if not torch.isfinite(want.to(torch.float64)).all():
            failures.append(f"{name}: the reference is not finite on these inputs")
            continue
        rel, where = _compare(out, want, tolerance)
        where["output"] = name
        if worst is None or not (rel <= worst["rel_err"]):
            worst = where
        if not rel <= tolerance:
            failures.append(f"{name}: rel_err {rel:.3e} above the tolerance {tolerance:.1e}; worst element "
                            f"{where['index']}: {where['value']!r} vs {where['reference']!r} (|diff| "
                            f"{where['magnitude']:.3e})")
    checks.append(Check("float64_reference", not failures, "" if not failures else f"{label}: " + "; ".join(failures),
                        worst or {}))
    return checks


def _status_name(status) -> str:
    from fact.abi import status_name
    return status_name(status) if isinstance(status, int) else "no status"


def _fold(name: str, checks: list[Check], label: str) -> Check:
    """A run's checks as one named check (the first failure's detail)."""
    for check in checks:
        if not check.passed:
            return Check(name, False, f"{check.name}: {check.detail}", check.data)
    worst = next((c.data for c in checks if c.name == "float64_reference"), {})
    return Check(name, True, f"{label}: written, finite, rel_err {worst.get('rel_err', 0):.2e}", worst)


def run_gates(call: dict, fragment_doc: dict, library: str | Path, *, device: str = "cpu",
              seed: int = 1234, timeout: float = 120.0, iters: int = 20, timing: bool = True,
              work_dir: str | Path | None = None) -> GateReport:
    """Runs every gate on `library` for `call` (a plan or agent-task call) against the
    fragment's semantics; never raises for anything the library does."""
    start = time.perf_counter()
    report = GateReport(passed=False, device=device)
    tolerance = float(call.get("tolerance") or 0.0)
    report.tolerance = tolerance

    def finish(checks: list[Check]) -> GateReport:
        report.checks = [asdict(c) for c in checks]
        failed = next((c for c in checks if not c.passed), None)
        report.passed = failed is None and bool(checks)
        report.failed_check = failed.name if failed else ""
        report.failure = failed.detail if failed else ""
        report.seconds = time.perf_counter() - start
        return report

    fragment = Fragment(fragment_doc)
    if fragment.problem:
        return finish([Check("reference", False, f"the reference semantics cannot be replayed: {fragment.problem}")])
    names = [r["value"] for r in call["results"]]
    if [s.id for s in fragment.outputs] != names:
        return finish([Check("reference", False, f"the call's results {names} are not the fragment's outputs "
                                                  f"{[s.id for s in fragment.outputs]}")])
    generator = torch.Generator().manual_seed(seed)
    values = {key: random_inputs(fragment.inputs, generator) for key in ("a", "b", "c")}
    folder = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="fact_gates_"))
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(values, folder / "values.pt")
    request = {"library": str(library), "call": call, "fragment": fragment_doc, "device": device,
               "values": str(folder / "values.pt"), "timing": timing, "iters": iters}
    (folder / "request.json").write_text(json.dumps(request))
    result_path = folder / "result.pt"
    if result_path.exists():
        result_path.unlink()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-m", "fact.agent.gates", "--child", str(folder / "request.json"), str(result_path)]
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        output, _ = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return finish([Check("time_limit", False, f"the kernel did not finish within {timeout:.0f} s (killed); "
                                                  f"the hang cost this attempt only")])
    tail = output.decode(errors="replace")[-2000:] if output else ""
    if returncode != 0 or not result_path.exists():
        why = (f"killed by signal {-returncode} ({signal.Signals(-returncode).name})" if returncode < 0
               else f"exit {returncode}")
        return finish([Check("crash", False, f"the kernel's process died ({why}) before the checks finished; "
                                             f"the crash cost this attempt only", {"output": tail})])
    raw = torch.load(result_path)
    checks: list[Check] = []
    if "load_error" in raw:
        return finish([Check("load", False, raw["load_error"])])
    info = raw.get("info", {})
    expected_device = "host" if device == "cpu" else "cuda"
    problems = []
    if info.get("kind") != call.get("kind"):
        problems.append(f"fact_kernel_info says kind {info.get('kind')!r}, the call is {call.get('kind')!r}")
    if info.get("abi_version") != 2:
        problems.append(f"fact_kernel_info says ABI version {info.get('abi_version')!r}, FACT runs 2")
    if info.get("device", expected_device) != expected_device:
        problems.append(f"the library was built for {info.get('device')!r}, the gates run on {expected_device}")
    checks.append(Check("load", not problems, "; ".join(problems), {"info": info}))
    if problems:
        return finish(checks)
    if "harness_error" in raw and not raw["runs"]:
        return finish(checks + [Check("workspace_query", False, raw["harness_error"])])
    runs = raw["runs"]
    first = runs.get("first")
    checks.append(Check("workspace_query", first is not None and first.get("workspace") is not None,
                        raw.get("harness_error", "") if first is None else f"{first.get('workspace')} bytes"))
    if first is None:
        return finish(checks)
    references = fragment.run(values["a"])
    checks.extend(_judge_run(first, references, names, tolerance, "first call"))
    worst = next(c for c in checks if c.name == "float64_reference").data
    report.rel_err = worst.get("rel_err")
    for name, key, label in (("repoison_rerun", "repoison", "second call, results re-poisoned, same inputs"),
                             ("new_inputs_new_results", "new_inputs", "third call, new input values in the same buffers"),
                             ("other_stream", "other_stream",
                              "fourth call, fresh buffers, on another stream" if device != "cpu"
                              else "fourth call, fresh buffers, from another thread")):
        run = runs.get(key)
        if run is None:
            checks.append(Check(name, False, raw.get("harness_error", "not run")))
            continue
        vals = values["b"] if key == "new_inputs" else values["c"] if key == "other_stream" else values["a"]
        checks.append(_fold(name, _judge_run(run, fragment.run(vals), names, tolerance, label), label))
    if timing:
        measured = raw.get("timing")
        checks.append(Check("timing", measured is not None, "" if measured else raw.get("harness_error", "not timed"),
                            measured or {}))
        report.timing = measured or {}
    return finish(checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.agent.gates")
    parser.add_argument("--child", nargs=2, metavar=("REQUEST", "RESULT"), required=True,
                        help="run a kernel library's calls (the gates' child process)")
    args = parser.parse_args(argv)
    return child_main(*args.child)


if __name__ == "__main__":
    sys.exit(main())
