"""The gates every kernel library passes before it joins a plan or the registry, whoever wrote it
(docs/architecture.md, "Every kernel passes the same gates"; docs/agent.md, "The gates").

A kernel library (built by the engine: fact_engine_build) implements one call of the kernel C
ABI — the argument image of an agent task or plan call, its pointer slots, operands and results
(docs/plan.md). `run_gates` checks it against the call's reference semantics (the captured
fragment, fact.agent.fragment) in float64 with FACT's one verifier, the same sequence every
kernel kind passes (docs/runtime.md, "What is checked"), reached through libfact's
fact_verify_call: Python supplies only the input values and the float64 reference (the fragment
run by PyTorch on the inputs as they are in memory after each call); the engine allocates the
buffers with guard bands, poisons the results, calls, checks and times. The gates, in order:

  load                      the library loads; fact_kernel_info names the call's kind, ABI
                            version 2 and the device it was built for; the entry exists
  workspace_query           the size query answers FACT_OK
  status                    the first call answers FACT_OK
  completes_on_return       every result is final when the call returns (CPU: unchanged 50 ms
                            later — no work left on another thread; GPU: complete once the given
                            stream is synchronized — no work on another stream)
  inputs_unchanged          every input is bitwise what it was before the call
  guard_bands               nothing written outside the results' elements (guard bands around
                            every input and result, gaps between strided elements)
  poisoned_outputs_written  no result element still holds the poison written before the call
  finite_outputs            no NaN or infinity (no NaN wildcards)
  float64_reference         ||out - ref|| / ||ref|| <= the call's tolerance for every result
                            (the largest |out - ref| reported); the reference is computed after
                            the call, so none exists in memory while the kernel runs
  repoison_rerun            the same call again on the same inputs, re-poisoned: written again,
                            and right (no "written once" laziness)
  new_inputs_new_results    new input values in the same buffers: the results follow them (no
                            cached results)
  other_stream              called on another stream (GPU) / from another thread (CPU): still
                            right
  timing                    the kernel and its baseline — the fragment run by PyTorch in the
                            model's dtype from the verifier's own input buffers into tensors of
                            its own (only the baseline's verifying call copies them into the
                            call's results; the timed runs copy nothing) — timed interleaved by
                            FACT's verifier (CUDA events with L2 flushed on a GPU, the steady
                            clock on the CPU); the speedup is the baseline's median over the
                            kernel's, both from the one report

The library runs only in a child process (`python -m fact.agent.gates --child`) with a time
limit: a crash or a hang fails the gates ("crash" / "time_limit") and costs the caller nothing
more. The child returns the verifier's report (fact.run/1); the parent turns it into the gates.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from fact.agent.fragment import Fragment, random_inputs

SETTLE_SECONDS = 0.05
BASELINE = "pytorch"  # the baseline's name in the verifier's report ("baselines")
CHECK_ORDER = ("load", "workspace_query", "status", "completes_on_return", "inputs_unchanged",
               "guard_bands", "poisoned_outputs_written", "finite_outputs", "float64_reference",
               "repoison_rerun", "new_inputs_new_results", "other_stream", "timing")
# The verifier's later checks (fact/runtime/verifier.hpp) as gates, in the order they run.
RERUNS = (("repoison_rerun", "repoison", "second call, results re-poisoned, same inputs"),
          ("new_inputs_new_results", "fresh_inputs", "third call, new input values in the same buffers"),
          ("other_stream", "other_stream", "fourth call, on another stream (GPU) / from another thread (CPU)"))


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
# The child: loads the library and runs FACT's verifier on it through libfact


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name}")
    return dtype


def _storage_elements(tensor: dict, slots: list) -> int:
    """Elements of a tensor's storage as the verifier sizes it (call_verify.cpp): every element
    its strides address, and the largest pointer slot's element offset."""
    offset = max([int(s.get("element_offset", 0)) for s in slots] or [0])
    extent = offset + 1
    for size, stride in zip(tensor["shape"], tensor["stride"]):
        extent = offset if size == 0 else extent + (size - 1) * stride
    if tensor.get("alloc_shape") is not None:  # a result allocated larger than its view (docs/plan.md)
        extent = max(extent, offset + math.prod(int(v) for v in tensor["alloc_shape"]))
    return max(extent, 1)


def _at(address: int, tensor: dict, slots: list) -> torch.Tensor:
    """The strided view of a tensor whose storage is host memory at `address`."""
    dtype = _dtype(tensor["dtype"])
    nbytes = _storage_elements(tensor, slots) * torch.empty((), dtype=dtype).element_size()
    raw = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=torch.uint8)
    return raw.view(dtype).as_strided(tuple(tensor["shape"]), tuple(tensor["stride"]), 0)


class _DeviceMemory:
    """`nbytes` of CUDA memory at `address`, for torch.as_tensor (__cuda_array_interface__)."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "strides": None, "version": 3}


def _on_device(address: int, tensor: dict, slots: list, device: str) -> torch.Tensor:
    """The strided view of a tensor whose storage is the verifier's buffer at `address`: host
    memory on the CPU, memory of `device` on a GPU."""
    if not device.startswith("cuda"):
        return _at(address, tensor, slots)
    dtype = _dtype(tensor["dtype"])
    nbytes = _storage_elements(tensor, slots) * torch.empty((), dtype=dtype).element_size()
    raw = torch.as_tensor(_DeviceMemory(address, nbytes), device=device)
    return raw.view(dtype).as_strided(tuple(tensor["shape"]), tuple(tensor["stride"]), 0)


def child_main(request_path: str, result_path: str) -> int:
    from fact import _engine, kernels
    request = json.loads(Path(request_path).read_text())
    values = torch.load(request["values"])
    call = request["call"]
    device = request.get("device", "cpu")
    cuda = device.startswith("cuda")
    out: dict[str, Any] = {}
    try:
        library = kernels.KernelLibrary(request["library"])
    except Exception as error:  # noqa: BLE001 - reported as the "load" check
        out["load_error"] = f"{type(error).__name__}: {error}"
        Path(result_path).write_text(json.dumps(out))
        return 0
    out["info"] = library.info
    fragment = Fragment(request["fragment"])
    slots = call["args"]["pointers"]
    operand_slots = [[s for s in slots if s["from"] == "operand" and s["index"] == i] for i in range(len(call["operands"]))]
    result_slots = [[s for s in slots if s["from"] == "result" and s["index"] == i] for i in range(len(call["results"]))]
    input_sets = (values["a"], values["b"])

    def fill(index: int, addresses: list) -> None:
        for operand, slot, address in zip(call["operands"], operand_slots, addresses):
            _at(address, operand, slot).copy_(input_sets[index][operand["value"]])

    def reference(operand_addresses: list, result_addresses: list) -> None:
        inputs = {operand["value"]: _at(address, operand, slot).clone()
                  for operand, slot, address in zip(call["operands"], operand_slots, operand_addresses)}
        outputs = fragment.run(inputs)
        for result, want, address in zip(call["results"], outputs, result_addresses):
            count = 1
            for size in result["shape"]:
                count *= size
            dense = torch.frombuffer((ctypes.c_double * max(count, 1)).from_address(address), dtype=torch.float64)
            dense[:count].copy_(want.to(torch.float64).reshape(-1))

    inputs_at: dict = {}
    streams: dict = {}

    def baseline(operand_addresses: list, result_addresses: list | None, stream: int) -> None:
        """The replaced subgraph run by PyTorch in the model's dtype from the verifier's own input
        buffers (on its stream on a GPU), its outputs in tensors PyTorch allocates, as in the model.
        Only the verifying call (result_addresses given) copies them into the call's results, to be
        checked; a timed run (None) is PyTorch's work alone, no copy into the verifier's buffers."""
        key = tuple(operand_addresses)
        if key not in inputs_at:
            inputs_at[key] = {operand["value"]: _on_device(address, operand, slot, device)
                              for operand, slot, address in zip(call["operands"], operand_slots, operand_addresses)}
        inputs = inputs_at[key]
        results = None if result_addresses is None else [
            _on_device(address, result, slot, device)
            for result, slot, address in zip(call["results"], result_slots, result_addresses)]

        def run() -> None:
            outputs = fragment.run(inputs, widen=False)
            if results is not None:
                for view, value in zip(results, outputs):
                    view.copy_(value)

        if cuda:
            if stream not in streams:
                streams[stream] = torch.cuda.ExternalStream(stream, device=torch.device(device))
            with torch.cuda.stream(streams[stream]):
                run()
        else:
            run()

    iters = int(request.get("iters", 20))
    verify_request = {"device": "cuda" if cuda else "host", "call": call, "tolerance": request["tolerance"],
                      "seed": int(request.get("seed", 1)), "verify_only": not request.get("timing", True),
                      "timing": {"warmup_runs": 3 if cuda else 2, "min_runs": iters, "max_runs": max(iters, 10),
                                 "min_time_s": 0.0},
                      "settle_s": SETTLE_SECONDS}
    try:
        code, response = _engine.engine_library().verify_call(verify_request, library.entry_address, fill, reference,
                                                              baseline if request.get("timing", True) else None,
                                                              BASELINE)
        if response.get("status") != "ok":
            raise RuntimeError(response.get("error") or f"fact_verify_call returned {code}")
        out["report"] = response["report"]
        if response.get("callback_errors"):
            out["callback_errors"] = response["callback_errors"]
    except Exception as error:  # noqa: BLE001 - the harness's own failure is reported, not raised
        out["harness_error"] = f"{type(error).__name__}: {error}"
    Path(result_path).write_text(json.dumps(out))
    return 0


# --------------------------------------------------------------------------------------------
# The parent: inputs, the child, the verdict


def _first_call_checks(check: dict, tolerance: float, names: list) -> list[Check]:
    """The verifier's first ("primary") check as the gates of the first call."""
    label = "first call"
    failure = check.get("failure", "")
    checks = []
    returned = failure.startswith("returned ")
    checks.append(Check("status", not returned, f"{label}: the call {failure}" if returned else ""))
    if returned:
        return checks
    final = check.get("final_at_return", True)
    checks.append(Check("completes_on_return", final, "" if final else
                        f"{label}: results changed after the call returned (work left running on another "
                        f"thread or stream: results must be final when the call returns / its stream is "
                        f"synchronized)"))
    unchanged = check.get("inputs_unchanged", True)
    checks.append(Check("inputs_unchanged", unchanged, "" if unchanged else f"{label}: the kernel wrote its operands"))
    outside = int(check.get("out_of_bounds", 0))
    checks.append(Check("guard_bands", outside == 0, "" if outside == 0 else
                        f"{label}: {outside} element(s) written outside the results (out of bounds)"))
    unwritten = int(check.get("unwritten", 0))
    checks.append(Check("poisoned_outputs_written", unwritten == 0, "" if unwritten == 0 else
                        f"{label}: {unwritten} of {check.get('elements')} result elements not written",
                        {"unwritten": unwritten}))
    nonfinite = int(check.get("nonfinite", 0))
    checks.append(Check("finite_outputs", nonfinite == 0, "" if nonfinite == 0 else
                        f"{label}: {nonfinite} NaN/inf element(s) written"))
    rel = check.get("rel_err")
    where = {"rel_err": rel, "tolerance": tolerance, "magnitude": check.get("max_abs_err"), "output": ", ".join(names)}
    right = rel is not None and rel <= tolerance and "float64 reference" not in failure
    detail = ""
    if not right:
        detail = (f"{label}: rel_err {rel:.3e} above the tolerance {tolerance:.1e}; worst element off by "
                  f"{check.get('max_abs_err', 0):.3e}" if rel is not None else f"{label}: {failure or 'not comparable'}")
    checks.append(Check("float64_reference", right, detail, where))
    return checks


def _rerun_check(name: str, check: dict, label: str) -> Check:
    if check.get("passed"):
        return Check(name, True, f"{label}: written, finite, rel_err {check.get('rel_err') or 0:.2e}",
                     {"rel_err": check.get("rel_err")})
    return Check(name, False, f"{label}: {check.get('failure', 'failed')}",
                 {"rel_err": check.get("rel_err"), "magnitude": check.get("max_abs_err")})


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
    values = {key: random_inputs(fragment.inputs, generator) for key in ("a", "b")}
    folder = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="fact_gates_"))
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(values, folder / "values.pt")
    request = {"library": str(library), "call": call, "fragment": fragment_doc, "device": device,
               "values": str(folder / "values.pt"), "timing": timing, "iters": iters, "tolerance": tolerance,
               "seed": seed}
    (folder / "request.json").write_text(json.dumps(request))
    result_path = folder / "result.json"
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
    raw = json.loads(result_path.read_text())
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
    verified = raw.get("report")
    if verified is None:
        why = raw.get("harness_error", "the verifier gave no report")
        if raw.get("callback_errors"):
            why += " (" + "; ".join(raw["callback_errors"]) + ")"
        return finish(checks + [Check("workspace_query", False, why)])
    error = verified.get("error", "")
    run = verified.get("checks", {})
    if error.startswith("workspace query"):
        return finish(checks + [Check("workspace_query", False, error)])
    checks.append(Check("workspace_query", True, f"{verified.get('workspace_bytes', 0)} bytes"))
    primary = run.get("primary")
    if primary is None:
        why = error or "the verifier ran no call"
        if raw.get("callback_errors"):
            why += " (" + "; ".join(raw["callback_errors"]) + ")"
        return finish(checks + [Check("status", False, why)])
    checks.extend(_first_call_checks(primary, tolerance, names))
    report.rel_err = primary.get("rel_err")
    for name, key, label in RERUNS:
        if key not in run:
            break  # the verifier stops at the first failure
        checks.append(_rerun_check(name, run[key], label))
    if any(not c.passed for c in checks):
        return finish(checks)
    if len(checks) < len(CHECK_ORDER) - 1:
        return finish(checks + [Check("status", False, error or "the verifier stopped early")])
    if timing:
        ms = (verified.get("ms") or {}).get("median")
        baseline = (verified.get("baselines") or {}).get(BASELINE) or {}
        baseline_ms = (baseline.get("ms") or {}).get("median")
        measured = None
        if ms and baseline_ms:
            spread, base = verified["ms"], baseline["ms"]
            measured = {"ms": ms, "spread_ms": [spread.get("p10"), spread.get("p90")],
                        "baseline": "PyTorch (the replaced subgraph, eager, same process, in the model's "
                                    "dtype, from the verifier's input buffers on its stream, into its own "
                                    "outputs)",
                        "baseline_ms": baseline_ms, "baseline_spread_ms": [base.get("p10"), base.get("p90")],
                        "baseline_status": baseline.get("status"),
                        "speedup": baseline_ms / ms if ms > 0 else None,
                        "timer": f"FACT's verifier ({verified.get('timing', {}).get('method')}), kernel and "
                                 f"baseline interleaved: {spread.get('runs')} and {base.get('runs')} runs"}
        why = raw.get("harness_error") or (f"baseline {BASELINE}: {baseline['error']}" if baseline.get("error")
                                           else "not timed")
        if raw.get("callback_errors"):
            why += " (" + "; ".join(raw["callback_errors"]) + ")"
        checks.append(Check("timing", measured is not None, "" if measured else why, measured or {}))
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
