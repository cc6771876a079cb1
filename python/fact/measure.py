"""`python -m fact.measure <package dir>`: the end-to-end check of a composed package, as the
`fact optimize` CLI prints it (its speedup table).

On a CUDA GPU, in one process and on the same inputs:
  - verification: the composed module and the original module against the original run in
    float64 on fresh random inputs (a new seed, full size): ‖out − ref‖ / ‖ref‖ for both, each
    run from the same module state. The float64 run converts the module's own parameters,
    buffers and tensor attributes in place and restores them (a copy would miss weights a
    forward reaches through Python closures, e.g. minGPT's
    `self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))`);
  - timing (fact.timing.time_cuda: CUDA events, warm-up, L2 flushed before each run, median and
    p10–p90): the original module in eager mode, under torch.compile (default) and
    torch.compile(mode="max-autotune") (unless --no-max-autotune), and the composed module
    (Inductor for the remainder, as `load()` gives it).
Writes <out>/e2e.json (the results shape, suite "e2e") and <out>/e2e.md, prints the
table. Without a CUDA GPU it says so and exits 0 having measured nothing.

Quiet by default (fact.console): the terminal shows the stages with a progress line and the
table; Inductor's autotuning output, compiler output and warnings go to the run's log,
$FACT_LOG_DIR/measure.log or <out>/logs/measure.log. `-v` shows them on the terminal as well.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from fact.console import RunLog, default_log_path, verbose_from_environment
from fact.module_state import other_state_attributes, preserved_state
from fact.timing import L2Flusher, TimingStats, time_cuda
from fact.versions import collect_versions


def _fresh_like(inputs: Sequence[Any], seed: int) -> tuple:
    generator = torch.Generator(device="cpu").manual_seed(seed)
    fresh = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            fresh.append(torch.randn(x.shape, generator=generator, dtype=torch.float32)
                         .to(device=x.device, dtype=x.dtype))
        else:
            fresh.append(x)
    return tuple(fresh)


def _relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = torch.linalg.vector_norm((out.double() - ref).flatten())
    return float(diff / torch.linalg.vector_norm(ref.flatten()).clamp_min(1e-300))


@contextlib.contextmanager
def float64_in_place(module: torch.nn.Module):
    """The module with every floating tensor its forward reads converted to float64 in place:
    parameters, buffers, plain tensor attributes (an RNN's `self.h0`) and tensors held in list,
    tuple and dict attributes (`self.hidden = (h0, c0)`), through every submodule. On exit
    (also when the body raises) the module holds what it held before: the same tensors, with
    their dtype, storage and values, and the same containers — also when the forward writes
    its state (a running buffer, a call counter; fact.module_state.preserved_state). Submodules
    reached only through Python closures are converted too, since they are the module's own
    submodules."""
    parameters: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    buffers: list[tuple[torch.nn.Module, str, torch.Tensor]] = []
    attributes: list[tuple[torch.nn.Module, str, Any]] = []
    seen: set[int] = set()

    def wide(value: Any) -> Any:
        if (isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
                and value.is_floating_point() and value.dtype != torch.float64):
            return value.to(torch.float64)
        return value

    with preserved_state(module):
        try:
            with torch.no_grad():
                for owner in module.modules():
                    for parameter in owner._parameters.values():
                        if parameter is None or id(parameter) in seen or not parameter.is_floating_point():
                            continue
                        seen.add(id(parameter))
                        parameters.append((parameter, parameter.data))
                        parameter.data = parameter.data.to(torch.float64)
                    for name, buffer in list(owner._buffers.items()):
                        if buffer is None or not buffer.is_floating_point():
                            continue
                        buffers.append((owner, name, buffer))
                        owner._buffers[name] = buffer.to(torch.float64)
                    for name, value in list(vars(owner).items()):
                        # Plain tensor attributes (an RNN's initial hidden state kept as self.h0).
                        if isinstance(value, torch.Tensor) and wide(value) is not value:
                            attributes.append((owner, name, value))
                            owner.__dict__[name] = wide(value)
                for _, owner, name in other_state_attributes(module):
                    # Tensors in containers: new containers, the user's are left as they are.
                    value = vars(owner)[name]
                    leaves = torch.utils._pytree.tree_leaves(value)
                    if any(wide(leaf) is not leaf for leaf in leaves):
                        attributes.append((owner, name, value))
                        owner.__dict__[name] = torch.utils._pytree.tree_map(wide, value)
            yield module
        finally:
            for parameter, data in parameters:
                parameter.data = data
            for owner, name, buffer in buffers:
                owner._buffers[name] = buffer
            for owner, name, value in attributes:
                owner.__dict__[name] = value


def verify(model: torch.nn.Module, composed: torch.nn.Module, inputs: Sequence[Any],
           seed: int) -> dict:
    """Errors of the composed and the original module against the original in float64."""
    fresh = _fresh_like(inputs, seed)
    wide = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in fresh)
    # Each run starts from the module's state as it is now and leaves it so (a module that
    # updates its state in forward would otherwise be compared at three different states).
    with torch.no_grad():
        with float64_in_place(model):
            ref = model(*wide)
        with preserved_state(model):
            composed_error = _relative_error(composed(*fresh), ref)
        with preserved_state(model):
            torch_error = _relative_error(model(*fresh), ref)
    return {"seed": seed, "fact_rel_err": composed_error, "torch_rel_err": torch_error}


def _timed(fn: Callable[[], object], warmup: int, iters: int, flusher: L2Flusher) -> TimingStats:
    with torch.no_grad():
        return time_cuda(fn, warmup, iters, flusher)


def _no_progress(label: str, index: int, total: int):
    return contextlib.nullcontext()


VARIANT_LABELS = {"torch_eager": "eager PyTorch", "torch_compile": "torch.compile",
                  "torch_compile_max_autotune": "torch.compile (max-autotune)", "fact": "FACT (composed)"}


def measure(package_dir: Path, max_autotune: bool = True, warmup: int = 10, iters: int = 30,
            flush_mb: int = 256, seed: int = 1234, log: Callable[[str], None] = print,
            progress: Callable[[str, int, int], Any] = _no_progress) -> dict:
    """Verification and timing of the package on the current CUDA device (see the module doc).
    `log` receives FACT's lines; `progress(label, steps done, steps)` is entered around each
    stage (fact.console.RunLog.step)."""
    from fact.package import build_packaged_model, load_package

    started = time.perf_counter()
    with progress("load the package and compose it (verifies each replacement)", 0, 6 if max_autotune else 5):
        model, inputs = build_packaged_model(package_dir, "cuda")
        composed = load_package(package_dir, "cuda", inputs=inputs)
    return measure_composed(package_dir.name, model, inputs, composed, max_autotune=max_autotune, warmup=warmup,
                            iters=iters, flush_mb=flush_mb, seed=seed, log=log, progress=progress, started=started)


def measure_composed(name: str, model: torch.nn.Module, inputs: Sequence[Any], composed: torch.nn.Module,
                     max_autotune: bool = True, warmup: int = 10, iters: int = 30, flush_mb: int = 256,
                     seed: int = 1234, log: Callable[[str], None] = print,
                     progress: Callable[[str, int, int], Any] = _no_progress,
                     started: float | None = None) -> dict:
    """`measure` of a module already composed on the GPU (`fact optimize` composes the package's
    plan on the program it exported once, as the package's load() does): e2e.json's document,
    the case named `name`."""
    started = time.perf_counter() if started is None else started
    total = 4 + (1 if max_autotune else 0) + 1
    report = composed.fact_report
    log(f"composed: {len(report.composed)} replacement(s); remainder {report.remainder}; "
        f"runs {report.runs}")
    with progress("float64 check on fresh inputs", 1, total):
        check = verify(model, composed, inputs, seed)
    log(f"float64 check (seed {seed}): FACT rel_err {check['fact_rel_err']:.3g}, "
        f"PyTorch {check['torch_rel_err']:.3g}")

    flusher = L2Flusher(flush_mb, inputs[0].device if isinstance(inputs[0], torch.Tensor)
                        else torch.device("cuda"))
    variants: dict[str, Callable[[], object]] = {"torch_eager": lambda: model(*inputs)}
    compiled_default = torch.compile(copy.deepcopy(model))
    variants["torch_compile"] = lambda: compiled_default(*inputs)
    if max_autotune:
        compiled_max = torch.compile(copy.deepcopy(model), mode="max-autotune")
        variants["torch_compile_max_autotune"] = lambda: compiled_max(*inputs)
    timings: dict[str, dict] = {}
    for step, (name, fn) in enumerate(variants.items(), start=2):
        what = "compile and time" if name.startswith("torch_compile") else "time"
        try:
            with progress(f"{what} {VARIANT_LABELS.get(name, name)}", step, total):
                timings[name] = _timed(fn, warmup, iters, flusher).to_json()
        except Exception as error:  # noqa: BLE001 - a baseline that fails is reported, not fatal
            timings[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
            log(f"{name} failed: {timings[name]['error']}")
    with progress(f"time {VARIANT_LABELS['fact']}", total - 1, total):
        fact_stats = _timed(lambda: composed(*inputs), warmup, iters, flusher).to_json()

    baselines = {name: {"ms": t.get("median_ms"), "rel_err": None, **({"error": t["error"]} if "error" in t else {})}
                 for name, t in timings.items()}
    baselines["torch_eager"]["rel_err"] = check["torch_rel_err"]
    speedup = {name: b["ms"] / fact_stats["median_ms"] for name, b in baselines.items() if b.get("ms")}
    versions = collect_versions(torch.device("cuda", torch.cuda.current_device()))
    return {
        "suite": "e2e",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": torch.cuda.get_device_name(),
        "versions": versions,
        "cases": [{
            "name": name,
            "precision": report.precision,
            "status": "ok",
            "fact_ms": fact_stats["median_ms"],
            "rel_err": check["fact_rel_err"],
            "baselines": baselines,
            "speedup": speedup,
            "config": "; ".join(f"{call.summary}: {call.config or c.implementation}"
                                for c in report.composed for call in c.calls),
            "timing": {"fact": fact_stats, **timings},
            "verification": check,
            "remainder": report.remainder,
            "cuda_graphs": report.cuda_graphs,
            "runs": report.runs,
            "left_to_pytorch": [f"{item.what}: {item.reason}" for item in report.left_to_pytorch],
        }],
        "seconds": time.perf_counter() - started,
    }


def render_markdown(doc: dict) -> str:
    """The speedup table of an e2e results document."""
    case = doc["cases"][0]
    lines = [f"## End to end on {doc['device']} ({case['precision']})", "",
             "| variant | ms (median) | p10–p90 ms | FACT speedup |", "|---|---|---|---|"]
    timing = case["timing"]
    for name, stats in list(timing.items())[1:] + [("fact", timing["fact"])]:
        if "error" in stats:
            lines.append(f"| {name} | – | – | failed: {stats['error']} |")
            continue
        spread = f"{stats['p10_ms']:.3f}–{stats['p90_ms']:.3f}"
        factor = "—" if name == "fact" else f"{case['speedup'].get(name, float('nan')):.2f}x"
        lines.append(f"| {'FACT (composed)' if name == 'fact' else name} | {stats['median_ms']:.3f} | {spread} | {factor} |")
    check = case["verification"]
    lines += ["", f"Against the module in float64 on fresh inputs (seed {check['seed']}): FACT "
                  f"rel_err {check['fact_rel_err']:.3g}, PyTorch {check['torch_rel_err']:.3g}. "
                  f"Remainder: {case['remainder']}.", f"Timer: {timing['fact'].get('timer', '')}."]
    if case["left_to_pytorch"]:
        lines += ["", "Left to PyTorch: " + "; ".join(case["left_to_pytorch"])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.measure", description=__doc__.splitlines()[0])
    parser.add_argument("package", help="a package folder written by fact optimize / fact.package")
    parser.add_argument("-o", "--out", default=None, help="folder for e2e.json / e2e.md (default: the package's parent)")
    parser.add_argument("--no-max-autotune", action="store_true", help="skip torch.compile(mode='max-autotune')")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show third-party output (Inductor autotuning, compilers, warnings) "
                             "on the terminal; it is always in the log")
    parser.add_argument("--log", default=None,
                        help="log file (default: $FACT_LOG_DIR/measure.log, else <out>/logs/measure.log)")
    args = parser.parse_args(None if argv is None else list(argv))
    package_dir = Path(args.package).resolve()
    if not torch.cuda.is_available():
        print("fact.measure: no CUDA GPU here: end-to-end verification and timing skipped")
        return 0
    out = Path(args.out) if args.out else package_dir.parent
    out.mkdir(parents=True, exist_ok=True)
    log_path = Path(args.log) if args.log else default_log_path("measure", out)
    with RunLog(log_path, verbose=args.verbose or verbose_from_environment(), title="fact.measure") as run:
        run.say(f"end-to-end check of {package_dir.name} (third-party output: {log_path})")
        try:
            doc = measure(package_dir, max_autotune=not args.no_max_autotune, warmup=args.warmup,
                          iters=args.iters, log=run.say, progress=run.step)
        except Exception as error:  # noqa: BLE001 - said on the terminal, traceback in the log
            run.failed(error)
            return 1
        (out / "e2e.json").write_text(json.dumps(doc, indent=2) + "\n")
        table = render_markdown(doc)
        (out / "e2e.md").write_text(table)
        run.say("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
