#!/usr/bin/env python3
"""GEMMs whose extents are not 16-byte aligned, end to end through fact.optimize, against eager,
torch.compile and torch.compile(mode="max-autotune") on one CUDA GPU.

Cases (each a small module built here, random weights; nothing is downloaded):
  f32_strict_8205x2949x5921  float32 `x @ w`, w a [5921, 2949] parameter, x [8205, 5921],
                             precision "strict" (every extent odd: K and N padded by FACT)
  bf16_linear_k770           bf16 nn.Linear(770, 1024) on x [4, 512, 770], precision "native"
  bf16_lm_head_50257         bf16 nn.Linear(768, 50257, bias=False) on x [8, 1024, 768] (an LM
                             head's vocabulary), precision "native"

Per case, in one process:
  - fact.optimize(module, example, precision, remainder="eager", tune=--tune) with its guards
    at their defaults (speed_guard on: never slower than torch.compile of the original;
    replacement_guard following it), timed as optimize_s;
  - the baselines: eager, torch.compile (default mode) and, unless --no-max-autotune,
    torch.compile(mode="max-autotune"), each compiled on its own copy by its first call;
  - every variant's output on fresh random inputs against the module run in float64
    (‖out − ref‖ / ‖ref‖); FACT's must be within the precision's bound (the engine's output
    tolerance: strict 1e-5, native 2e-2), eager's error is recorded beside it;
  - all variants timed with fact.timing.l2_flushed_medians_ms (interleaved, the L2 flushed
    before each run, under no_grad), median of --iters runs;
  - what the composed module's report says runs (`runs`, each composed replacement with its
    note, e.g. "K padded 5921→5924, N padded 2949→2952", and what was left to PyTorch).

float32 runs with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, PyTorch's default),
so eager and torch.compile run full float32 GEMMs, as `strict` does.

The results file (--out, default bench/results/unaligned-<device slug>-<date>.json) follows
docs/architecture.md "Measuring": suite, date, device, versions, settings, cases (name,
precision, status, fact_ms, rel_err, baselines {name: {ms, rel_err}}, speedup {name: ratio},
vs_best, the report) and a summary; it is rewritten after every case. One line per case is
printed. Exit status: 0; 1 when a case's answer is wrong (FACT's error above the bound), a case
failed or the run was interrupted (the file is written all the same); 2 without a CUDA GPU.

Usage (device): PYTHONPATH=python python3 bench/gemm_unaligned/run_unaligned.py
    [--cases f32_strict_8205x2949x5921,bf16_linear_k770,bf16_lm_head_50257] [--tune 2]
    [--no-max-autotune] [--warmup 3] [--iters 20] [--out FILE] [--work-dir out/unaligned]
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
if str(REPO_ROOT / "python") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import torch  # noqa: E402

SUITE = "unaligned"
SCHEMA = "fact.bench.unaligned/1"
# Timed against FACT, in this order; max-autotune is left out with --no-max-autotune.
BASELINES = ("torch_eager", "torch_compile", "torch_compile_max_autotune")
EXAMPLE_SEED, FRESH_SEED = 0, 1


# ---------------------------------------------------------------------------------------------
# Cases


class MatmulByWeight(torch.nn.Module):
    """`x @ weight` with the weight a [K, N] parameter (the product as written, no transpose)."""

    def __init__(self, k: int, n: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(k, n, device=device, dtype=dtype) / k ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


@dataclass
class UnalignedCase:
    """One benchmark case: the module (in eval mode, on its device and dtype), its example
    inputs, how to draw fresh inputs of the same shapes, and the GEMM's extents."""
    name: str
    what: str
    precision: str
    dtype: torch.dtype
    module: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    fresh_inputs: Callable[[int], tuple[torch.Tensor, ...]]   # seed -> new inputs
    gemm: dict[str, int]                                       # {"m", "n", "k"} of the product

    def shape(self) -> dict[str, Any]:
        """The case's shapes for the results file."""
        return {**self.gemm, "inputs": [list(x.shape) for x in self.inputs],
                "parameters": {name: list(p.shape) for name, p in self.module.named_parameters()}}


def _random_inputs(shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                   seed: int) -> tuple[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(*shape, generator=generator, device=device, dtype=dtype),)


def strict_product_case(m: int = 8205, n: int = 2949, k: int = 5921,
                        device: torch.device | str = "cuda") -> UnalignedCase:
    """float32 `x @ w` (w [k, n], x [m, k]) composed with precision "strict"."""
    torch.manual_seed(EXAMPLE_SEED)
    module = MatmulByWeight(k, n, device=device).eval()
    x_shape = (m, k)
    return UnalignedCase(
        name=f"f32_strict_{m}x{n}x{k}", what=f"float32 x @ w, x [{m}, {k}], w [{k}, {n}]",
        precision="strict", dtype=torch.float32, module=module,
        inputs=_random_inputs(x_shape, torch.float32, device, EXAMPLE_SEED),
        fresh_inputs=lambda seed: _random_inputs(x_shape, torch.float32, device, seed),
        gemm={"m": m, "n": n, "k": k})


def _bf16_linear_case(name: str, what: str, batch: int, seq: int, in_features: int,
                      out_features: int, bias: bool, device: torch.device | str) -> UnalignedCase:
    torch.manual_seed(EXAMPLE_SEED)
    module = torch.nn.Linear(in_features, out_features, bias=bias, device=device,
                             dtype=torch.bfloat16).eval()
    x_shape = (batch, seq, in_features)
    return UnalignedCase(
        name=name, what=what, precision="native", dtype=torch.bfloat16, module=module,
        inputs=_random_inputs(x_shape, torch.bfloat16, device, EXAMPLE_SEED),
        fresh_inputs=lambda seed: _random_inputs(x_shape, torch.bfloat16, device, seed),
        gemm={"m": batch * seq, "n": out_features, "k": in_features})


def bf16_linear_case(batch: int = 4, seq: int = 512, in_features: int = 770,
                     out_features: int = 1024, device: torch.device | str = "cuda") -> UnalignedCase:
    """bf16 nn.Linear with an unaligned K (770: K padded by FACT), precision "native"."""
    return _bf16_linear_case(
        f"bf16_linear_k{in_features}",
        f"bf16 nn.Linear({in_features}, {out_features}) on x [{batch}, {seq}, {in_features}]",
        batch, seq, in_features, out_features, True, device)


def bf16_lm_head_case(batch: int = 8, seq: int = 1024, embed: int = 768, vocab: int = 50257,
                      device: torch.device | str = "cuda") -> UnalignedCase:
    """bf16 LM head, nn.Linear(embed, vocab, bias=False), with an unaligned N (GPT-2's
    vocabulary), precision "native"."""
    return _bf16_linear_case(
        f"bf16_lm_head_{vocab}",
        f"bf16 LM head nn.Linear({embed}, {vocab}, bias=False) on x [{batch}, {seq}, {embed}]",
        batch, seq, embed, vocab, False, device)


# Name on the command line -> the builder of its full-size case (keyword sizes for other sizes).
CASE_BUILDERS: dict[str, Callable[..., UnalignedCase]] = {
    "f32_strict_8205x2949x5921": strict_product_case,
    "bf16_linear_k770": bf16_linear_case,
    "bf16_lm_head_50257": bf16_lm_head_case,
}


# ---------------------------------------------------------------------------------------------
# Results


def results_row(case: dict[str, Any], fact_ms: float | None, baseline_ms: dict[str, float | None],
                rel_errs: dict[str, float | None], bound: float) -> dict[str, Any]:
    """The timing and correctness part of a case's results: `case` (name, precision, shape, ...)
    extended with fact_ms, rel_err, baselines {name: {ms, rel_err}}, speedup {name: baseline's
    ms / FACT's} (> 1: FACT faster), vs_best {name, ms, speedup} against the fastest baseline
    timed, the bound and the status ("wrong" when FACT's error is above the bound or not
    finite, "unverified" without FACT's error, "not timed" without FACT's time, else "ok"; a
    status already set, such as "failed", is kept). Pure: no torch, no GPU."""
    row = dict(case)
    fact_err = rel_errs.get("fact")
    row.update(fact_ms=fact_ms, rel_err=fact_err, bound=bound)
    row["baselines"] = {name: {"ms": baseline_ms.get(name), "rel_err": rel_errs.get(name)}
                        for name in baseline_ms}
    timed = {name: ms for name, ms in baseline_ms.items() if ms}
    row["speedup"] = {name: ms / fact_ms for name, ms in timed.items()} if fact_ms else {}
    row["vs_best"] = None
    if timed and fact_ms:
        best = min(timed, key=timed.get)
        row["vs_best"] = {"name": best, "ms": timed[best], "speedup": timed[best] / fact_ms}
    if row.get("status") == "failed":
        return row
    if fact_err is not None and not (math.isfinite(fact_err) and fact_err <= bound):
        row.update(status="wrong", reason=f"FACT's rel_err {fact_err:.3g} > bound {bound:.2g}")
    elif fact_err is None:
        row.update(status="unverified", reason=row.get("reason") or "no float64 check of FACT's output")
    elif fact_ms is None:
        row.update(status="not timed", reason=row.get("reason") or "FACT was not timed")
    else:
        row.update(status="ok", reason="")
    return row


def report_summary(report) -> dict[str, Any]:
    """What the composed module's report (fact.report.FactReport) says ran: `runs`, the
    composed replacements (rule, notes such as "K padded 5921→5924", their calls and checks),
    what was left to PyTorch and why, the never-slower check's times, optimize's stages."""
    return {
        "runs": report.runs, "remainder": report.remainder, "cuda_graphs": report.cuda_graphs,
        "speed_guard": report.speed,
        "composed": [{"label": c.label, "rule": c.rule, "pattern": c.pattern,
                      "implementation": c.implementation, "note": c.note, "verified": c.verified,
                      "rel_err": c.rel_err, "tolerance": c.tolerance, "derived": list(c.derived),
                      "calls_ms": c.calls_ms, "subgraph_ms": c.subgraph_ms,
                      "compiled_subgraph_ms": c.compiled_subgraph_ms,
                      "calls": [{"label": call.label, "kind": call.kind, "summary": call.summary,
                                 "config": call.config, "kernel": call.kernel}
                                for call in c.calls]}
                     for c in report.composed],
        "left_to_pytorch": [{"what": item.what, "reason": item.reason, "stage": item.stage}
                            for item in report.left_to_pytorch],
        "notes": list(report.notes),
        "stage_seconds": {stage: round(s, 3) for stage, s in report.stage_seconds.items()},
    }


def summarize(cases: Sequence[dict]) -> dict[str, Any]:
    """Per case FACT's speedup against the best baseline and against torch.compile, and the
    cases that are wrong, failed or were interrupted."""
    return {
        "vs_best": {c["name"]: (c.get("vs_best") or {}).get("speedup") for c in cases},
        "vs_torch_compile": {c["name"]: c.get("speedup", {}).get("torch_compile") for c in cases},
        "wrong": [c["name"] for c in cases if c.get("status") == "wrong"],
        "failed": [c["name"] for c in cases if c.get("status") == "failed"],
        "interrupted": [c["name"] for c in cases if c.get("status") == "interrupted"],
    }


def summary_line(row: dict[str, Any]) -> str:
    """One line per case: times, speedups, errors, what ran and the composed notes."""
    def ms(value):
        return "-" if value is None else f"{value:.4g} ms"

    def err(value):
        return "-" if value is None else f"{value:.2e}"

    best = row.get("vs_best") or {}
    baselines = row.get("baselines", {})
    report = row.get("report") or {}
    notes = "; ".join(c["note"] for c in report.get("composed", []) if c.get("note"))
    return (f"{row['name']} [{row.get('status')}]: fact {ms(row.get('fact_ms'))}, "
            + ", ".join(f"{name} {ms(b.get('ms'))}" for name, b in baselines.items())
            + (f"; vs best ({best['name']}) {best['speedup']:.2f}x" if best else "; vs best -")
            + f"; rel_err fact {err(row.get('rel_err'))} (bound {row.get('bound', 0):.0e}), eager "
            f"{err(baselines.get('torch_eager', {}).get('rel_err'))}"
            + (f"; runs: {report['runs']}" if report.get("runs") else "")
            + (f"; {notes}" if notes else "")
            + (f"; {row['reason']}" if row.get("reason") else ""))


def timer_description(names: Sequence[str], warmup: int, iters: int) -> str:
    """How fact.timing.l2_flushed_medians_ms times (its flush: twice the current device's L2,
    at least 64 MiB), in the words of fact.timing.time_cuda_interleaved's timer string."""
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    flush_mb = max(64, 2 * (getattr(properties, "L2_cache_size", 0) or 0) // (1024 * 1024))
    return (f"fact.timing.l2_flushed_medians_ms under no_grad: CUDA events, {warmup} warm-up + "
            f"{iters} timed runs, L2 flushed ({flush_mb} MiB write) before each, interleaved with "
            f"{', '.join(names)} (order rotating each round); median")


def default_out_path(device_name: str, day: str) -> Path:
    from fact.conformance.gpu_case import device_slug
    return REPO_ROOT / "bench" / "results" / f"{SUITE}-{device_slug(device_name)}-{day}.json"


# ---------------------------------------------------------------------------------------------
# One case on the GPU


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:600]


def _compiled(module: torch.nn.Module, example: tuple, mode: str | None) -> Callable:
    """torch.compile of a copy of the module (no variant sees another's guards), compiled by
    its first call."""
    compiled = torch.compile(copy.deepcopy(module), mode=mode)
    with torch.no_grad():
        compiled(*example)
    torch.cuda.synchronize()
    return compiled


def _errors_against_float64(case: UnalignedCase, variants: dict[str, Callable],
                            stage: Callable[[str, Callable[[], Any]], Any]) -> dict[str, float | None]:
    """Each variant's ‖out − ref‖ / ‖ref‖ on fresh inputs, ref the module run in float64 (None
    where that stage raised; `stage` runs and records each step)."""
    from fact.conformance.corpus import float64_output, relative_error

    fresh = case.fresh_inputs(FRESH_SEED)
    reference = stage("float64_reference", lambda: float64_output(case.module, fresh).detach())
    if reference is None:
        return {}

    def error_of(fn: Callable) -> float:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return relative_error(fn(*fresh), reference)
    return {variant: stage(f"verify_{variant}", lambda fn=fn: error_of(fn))
            for variant, fn in variants.items()}


def measure_case(name: str, args: argparse.Namespace, log: Callable[[str], None]) -> dict:
    """One case measured in full (module docstring); a stage that raises is recorded in
    row["errors"] and the case marked failed when FACT's time or error is missing because of it."""
    from fact.conformance.corpus import output_bounds, quiet_torch
    from fact.timing import l2_flushed_medians_ms
    import fact

    device = torch.device("cuda", torch.cuda.current_device())
    case = CASE_BUILDERS[name](device=device)
    bound = output_bounds()[case.precision]
    info: dict[str, Any] = {"name": case.name, "what": case.what, "precision": case.precision,
                            "dtype": str(case.dtype).removeprefix("torch."), "shape": case.shape(),
                            "status": "", "reason": "", "errors": {}, "seconds": {}}
    variants: dict[str, Callable] = {"torch_eager": case.module}

    def stage(label: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return fn()
        except Exception as error:  # noqa: BLE001 - recorded, the rest runs
            traceback.print_exc()
            info["errors"][label] = _first_line(error)
            if isinstance(error, torch.OutOfMemoryError):
                gc.collect()
                torch.cuda.empty_cache()
            return None
        finally:
            info["seconds"][label] = round(time.perf_counter() - started, 3)

    log(f"{name}: fact.optimize (precision {case.precision}, tune {args.tune}, guards on)")

    def optimize():
        with quiet_torch(), torch.no_grad():
            return fact.optimize(case.module, case.inputs, case.precision, remainder="eager",
                                 tune=args.tune, work_dir=Path(args.work_dir) / name)
    composed = stage("optimize", optimize)
    info["optimize_s"] = info["seconds"]["optimize"]
    if composed is not None:
        variants["fact"] = composed
        info["report"] = report_summary(composed.fact_report)
        log(f"{name}: optimized in {info['optimize_s']:.1f} s; runs: {composed.fact_report.runs}")
        print(composed.fact_report, flush=True)
    for baseline, mode in (("torch_compile", None), ("torch_compile_max_autotune", "max-autotune")):
        if baseline == "torch_compile_max_autotune" and not args.max_autotune:
            info["errors"][baseline] = "skipped (--no-max-autotune)"
            continue
        log(f"{name}: {baseline}: compile")
        compiled = stage(baseline, lambda mode=mode: _compiled(case.module, case.inputs, mode))
        if compiled is not None:
            variants[baseline] = compiled
            info.setdefault("compile_s", {})[baseline] = info["seconds"][baseline]

    rel_errs = _errors_against_float64(case, variants, stage)

    # Timing: every variant interleaved, the L2 flushed before each run
    log(f"{name}: time {', '.join(variants)} ({args.warmup} warm-up + {args.iters} runs each)")
    timed = {variant: (lambda fn=fn: fn(*case.inputs)) for variant, fn in variants.items()}
    times = stage("timing", lambda: l2_flushed_medians_ms(timed, warmup=args.warmup,
                                                          iters=args.iters)) or {}
    info["timer"] = timer_description(list(timed), args.warmup, args.iters)

    if composed is None:
        info.update(status="failed", reason=f"optimize: {info['errors']['optimize']}")
    elif "fact" not in times or rel_errs.get("fact") is None:
        failed = [label for label in ("timing", "float64_reference", "verify_fact")
                  if label in info["errors"]]
        if failed:
            info.update(status="failed", reason="; ".join(f"{label}: {info['errors'][label]}"
                                                          for label in failed))
    baselines = [b for b in BASELINES if b != "torch_compile_max_autotune" or args.max_autotune]
    row = results_row(info, times.get("fact"), {b: times.get(b) for b in baselines}, rel_errs, bound)
    for baseline, entry in row["baselines"].items():   # why a baseline has no time or error
        for label in (baseline, f"verify_{baseline}", "timing"):
            if label in info["errors"]:
                entry["error"] = info["errors"][label]
                break
    return row


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASE_BUILDERS),
                        help=f"comma-separated, of {', '.join(CASE_BUILDERS)}")
    parser.add_argument("--tune", type=int, default=2,
                        help="fact.optimize's tune: at most N configurations tuned on the GPU "
                             "(0: the engine's configuration)")
    parser.add_argument("--max-autotune", action=argparse.BooleanOptionalAction, default=True,
                        help="the torch.compile(mode='max-autotune') baseline")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", default=None,
                        help="results file (default bench/results/unaligned-<device slug>-<date>.json)")
    parser.add_argument("--work-dir", default=str(REPO_ROOT / "out" / "unaligned"),
                        help="fact.optimize's work folders, one per case")
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in CASE_BUILDERS]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASE_BUILDERS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("run_unaligned.py: no CUDA GPU here; this benchmark times FACT's kernels against "
              "PyTorch's on a CUDA GPU (Hopper for FACT's kernels)", file=sys.stderr)
        return 2
    from fact.versions import collect_versions

    started = time.perf_counter()
    device = torch.device("cuda", torch.cuda.current_device())
    device_name = torch.cuda.get_device_name(device)
    today = date.today().isoformat()
    out = Path(args.out) if args.out else default_out_path(device_name, today)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    settings = dict(vars(args), allow_tf32={"matmul": torch.backends.cuda.matmul.allow_tf32,
                                            "cudnn": torch.backends.cudnn.allow_tf32},
                    remainder="eager", speed_guard=True, replacement_guard="default (follows speed_guard)")
    document: dict[str, Any] = {"suite": SUITE, "schema": SCHEMA, "date": today,
                                "device": device_name, "versions": collect_versions(device),
                                "settings": settings, "cases": [], "summary": {}}

    def log(message: str) -> None:
        print(f"[unaligned {time.perf_counter() - started:6.1f}s] {message}", flush=True)

    def save() -> None:
        document["summary"] = summarize(document["cases"])
        document["seconds"] = round(time.perf_counter() - started, 1)
        out.write_text(json.dumps(document, indent=1, default=str) + "\n")

    lines = []
    try:
        for name in args.cases:
            try:
                row = measure_case(name, args, log)
            except KeyboardInterrupt:
                document["cases"].append({"name": name, "status": "interrupted",
                                          "reason": "SIGINT while measuring"})
                raise
            except Exception as error:  # noqa: BLE001 - recorded, next case
                traceback.print_exc()
                row = {"name": name, "status": "failed", "reason": _first_line(error)}
            document["cases"].append(row)
            save()
            line = summary_line(row) if "baselines" in row else f"{name} [failed]: {row['reason']}"
            lines.append(line)
            log(line)
            torch._dynamo.reset()
            gc.collect()
            torch.cuda.empty_cache()
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
    save()
    print("\n".join(lines))
    print(f"wrote {out}")
    summary = document["summary"]
    bad = summary["wrong"] + summary["failed"] + summary["interrupted"]
    if bad:
        print(f"wrong, failed or interrupted: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
