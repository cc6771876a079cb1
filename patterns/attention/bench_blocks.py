#!/usr/bin/env python3
"""Blocks end to end on the GPU, with each pattern's share: the packages `fact optimize` wrote
(one per block and dtype) against PyTorch in the same process, on the same inputs.

For each package (in the order given), variants built and verified in this order, each skipped
(and recorded as skipped) when the time budget would not allow it, then timed together:
  torch_eager                  the block as written
  fact                         the package composed as users load it (fact.package.load_package:
                               every planned replacement, Inductor for the remainder)
  torch_compile                torch.compile(model)
  torch_compile_max_autotune   torch.compile(model, mode="max-autotune") (its compile takes a minute)
  torch_compile_sdpa           torch.compile of the model file's `sdpa_twin(model)` when the file
                               defines one (the block with attention through
                               F.scaled_dot_product_attention: bench/models/llama_block.py)
  fact_attention_only          the package with patterns=["attention"]
  fact_gemms_only              the package with patterns=["gemm", "mlp", "swiglu", "rope"]
  fact_no_rope                 the package without its rope replacements (the q/k projections and
                               their rotary embedding left to PyTorch): the fused rope's share
                               (the fused rope is opt-in, patterns/rope/README.md: a package holds
                               rope replacements only when it was planned with rope named,
                               e.g. python -m fact.package --patterns rope,gemm,attention,...)
  fact_cuda_graphs             the package with cuda_graphs=True (the forward captured as a CUDA
                               graph: what launch gaps cost)
  fact_rmsnorm                 the model planned again in this process (fact.optimize: the engine
                               discovers, realizes and compiles) with the opt-in RMSNorm fold named
                               (patterns/rmsnorm/README.md: each norm folded into the projections
                               that read it), the other patterns as the package has them, no rope:
                               against `fact` it measures the fold. Its kernels take the stored
                               (tuning database) or default configurations; plan the package with
                               --no-tune for a like-for-like comparison
Every FACT variant is verified first: the composed module and the original against the
original run in float64 on fresh inputs (fact.measure.verify), ‖out − ref‖ / ‖ref‖; apply_plan
also checked each replacement against the subgraph it replaces. FACT variants run with
speed_guard=False (the composed module itself is timed, never its fallback). Timing: once every
variant of a case is built, all of them together with fact.timing.time_cuda_interleaved (CUDA
events, warm-up, L2 flushed before each run, rounds of one run of each variant in rotating
order; median and p10–p90), so that every ratio between two variants comes from the same
rounds: timed one after the other, clock drift during the case fell on each variant differently
(FACT on the llama block in bf16, H200, 2026-11-26: median 6.076 ms, min 5.724). Each case's
"timing" entries name the interleaving in their "timer". A case's variants (their compiled
modules) stay alive until they are timed, and are freed before the next case is built. On the
CPU (--device cpu, a smoke test) the same rounds are timed with time.perf_counter.

Writes <out-dir>/blocks-<device>-<date>.json in the results shape (suite "blocks"; one
case per package: fact_ms, rel_err, baselines, speedup, config, plus "ablation" with each
pattern's share and "left_to_pytorch"), rewritten after every variant built and after the
case's timing (the ms of baselines and ablation entries appear once the case is timed; the
cases of an earlier run of the same day and device are kept: a later call adds its packages),
and prints a short table of every case last.

--variants narrows the list (e.g. torch_eager,fact,torch_compile_sdpa,fact_gemms_only).
--profile adds, for FACT and the torch.compile baselines, where the time goes: the CUDA kernels
of a few profiled runs (torch.profiler), each kernel's time per forward, in the case's "profile".

Usage: PYTHONPATH=python python3 patterns/attention/bench_blocks.py --package DIR [--package DIR ...]
           [--out-dir DIR] [--time-budget SECONDS] [--iters N] [--variants A,B,...] [--profile]
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from fact.kernel_profile import kernel_profile
from fact.measure import _fresh_like, _relative_error, float64_in_place
from fact.package import build_packaged_model, load_package
from fact.timing import L2Flusher, TimingStats, summarize, time_cuda_interleaved
from fact.versions import collect_versions

GEMM_PATTERNS = ["gemm", "mlp", "swiglu", "rope"]  # rope: a projection GEMM with its rotary epilogue
# fact_rmsnorm's selection: the opt-in fold and what it folds into (not rope: opt-in, slower).
RMSNORM_PATTERNS = ["rmsnorm", "attention", "gemm", "mlp", "swiglu"]
# Seconds each variant is expected to take at most (compile included; on an H200 the minGPT
# block's first torch.compile call took 5.5 s, max-autotune's 67 s, a fact.optimize with the
# Inductor remainder 48 s: bench/results/compose-nvidia-h200-2026-11-22-part1.md); a variant
# starts only when this much of the budget is left.
EXPECTED_SECONDS = {"torch_eager": 15, "fact": 60, "torch_compile": 30, "torch_compile_max_autotune": 120,
                    "torch_compile_sdpa": 30, "fact_attention_only": 45, "fact_gemms_only": 45,
                    "fact_cuda_graphs": 60, "fact_no_rope": 45, "fact_rmsnorm": 180, "fact_tf32": 120,
                    "torch_eager_tf32": 15}
# Seconds kept for timing the built variants together at the end of a case (the interleaved
# rounds and, with --profile, the profiles): a variant is built only when its expected seconds
# plus these are left.
TIMING_SECONDS = 15
PROFILED = ("fact", "fact_cuda_graphs", "torch_compile", "torch_compile_sdpa", "torch_compile_max_autotune")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def first_line(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0][:300]


def sdpa_twin_of(model):
    """The model file's `sdpa_twin` (the block with SDPA attention, same weights), or None."""
    return getattr(sys.modules.get(type(model).__module__), "sdpa_twin", None)


class Run:
    def __init__(self, args):
        self.args = args
        self.started = time.perf_counter()
        self.device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        self.date = time.strftime("%Y-%m-%d", time.gmtime())
        self.path = Path(args.out_dir) / f"blocks-{slug(self.device)}-{self.date}.json"
        self.doc = {"suite": "blocks", "date": self.date, "device": self.device,
                    "versions": collect_versions(torch.device(args.device)),
                    "cases": [], "notes": []}
        if self.path.is_file():  # a run of the same day and device: its cases stay, ours are added
            try:
                earlier = json.loads(self.path.read_text())
                if earlier.get("suite") == "blocks" and earlier.get("device") == self.device:
                    self.doc["cases"] = earlier.get("cases", [])
                    self.doc["notes"] = earlier.get("notes", [])
            except (OSError, ValueError):
                pass

    def left(self) -> float:
        return self.args.time_budget - (time.perf_counter() - self.started)

    def log(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f}s] {text}", flush=True)

    def save(self) -> None:
        self.doc["seconds"] = time.perf_counter() - self.started
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.doc, indent=2) + "\n")


def composed_summary(report) -> list[str]:
    return [f"{entry.label} {entry.rule}: " + ", ".join(f"{call.summary} [{call.kernel or call.config}]"
                                                        for call in entry.calls)
            for entry in report.composed]


def run_package(run: Run, package: Path) -> None:
    meta = json.loads((package / "package.json").read_text())
    device = torch.device(run.args.device)
    model, inputs = build_packaged_model(package, run.args.device)
    dtype = str(meta.get("dtype") or next(p.dtype for p in model.parameters())).replace("torch.", "")
    name = f"{meta.get('class_name', package.name)}_{dtype}"
    case = {"name": name, "precision": None, "status": "partial", "fact_ms": None, "rel_err": None,
            "baselines": {}, "speedup": {}, "config": "", "ablation": {}, "timing": {},
            "left_to_pytorch": [], "skipped": {}, "package": str(package), "profile": {},
            "shape": [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]}
    run.doc["cases"].append(case)
    flusher = L2Flusher(run.args.flush_mb if device.type == "cuda" else 0, device)
    iters, warmup = run.args.iters, run.args.warmup
    # The float64 reference on fresh inputs (a new seed, full size), once: every variant's
    # error is measured against it (fact.measure's check).
    fresh = _fresh_like(inputs, run.args.seed)
    wide = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in fresh)
    with torch.no_grad(), float64_in_place(model):
        reference = model(*wide)
    del wide

    def error_of(fn) -> float:
        with torch.no_grad():
            return _relative_error(fn(*fresh), reference)

    # Built and verified variants of this case, kept alive until they are timed together:
    # key -> (the call that is timed, what records its entries once its timing is known).
    built: dict[str, tuple[Callable[[], object], Callable[[dict], None]]] = {}

    def fact_variant(key: str, patterns, cuda_graphs: bool = False) -> str:
        composed = load_package(package, run.args.device, inputs=inputs, patterns=patterns, speed_guard=False,
                                cuda_graphs=cuda_graphs)
        return build_composed(key, composed, patterns)

    def fact_planned_variant(key: str, patterns, precision: str | None = None) -> str:
        """The model planned and composed in this process with `patterns` named (an opt-in fold the
        package was not planned with) or in another `precision` (a float32 block in tf32), the
        Inductor remainder as the package has it."""
        from fact.compose import optimize

        work = Path(tempfile.mkdtemp(prefix=f"fact_bench_{key}_"))
        composed = optimize(model, inputs, precision, work_dir=work, remainder="inductor", patterns=patterns,
                            speed_guard=False)
        return build_composed(key, composed, patterns, plan=str(work))

    def build_composed(key: str, composed, patterns, plan: str | None = None) -> str:
        report = composed.fact_report
        check = {"seed": run.args.seed, "fact_rel_err": error_of(composed), "torch_rel_err": error_of(model)}
        entry = {"ms": None, "rel_err": check["fact_rel_err"], "torch_rel_err": check["torch_rel_err"],
                 "patterns": patterns, "composed": composed_summary(report),
                 "verified": all(e.verified for e in report.composed), "remainder": report.remainder,
                 "runs": report.runs}
        if plan is not None:
            entry["plan"] = plan
        entry["precision"] = report.precision
        if key == "fact":
            case["precision"] = report.precision  # the verification is recorded now; the time once all variants are timed
            case["rel_err"] = check["fact_rel_err"]
            case["verification"] = check
            case["config"] = "; ".join(f"{call.summary}: {call.kernel or call.config}"
                                       for e in report.composed for call in e.calls)
            case["left_to_pytorch"] = [f"{item.what}: {item.reason}" for item in report.left_to_pytorch]

        def record(stats: dict) -> None:
            entry["ms"] = stats["median_ms"]
            if key == "fact":
                case["fact_ms"] = stats["median_ms"]
            case["ablation"]["all" if key == "fact" else key.removeprefix("fact_")] = entry

        built[key] = ((lambda: composed(*inputs)), record)
        return f"rel_err {check['fact_rel_err']:.2e}"

    def baseline(key: str, mode, source=None) -> str:
        source = model if source is None else source
        if key == "torch_eager":
            fn = lambda *xs: source(*xs)  # noqa: E731
        elif key == "torch_eager_tf32":
            fn = lambda *xs: _with_tf32(source, xs)  # noqa: E731
        else:
            fn = _compiled(source, inputs, mode)
        rel_err = error_of(fn)

        def record(stats: dict) -> None:
            case["baselines"][key] = {"ms": stats["median_ms"], "rel_err": rel_err}

        built[key] = ((lambda: fn(*inputs)), record)
        return f"rel_err {rel_err:.2e}"

    twin = sdpa_twin_of(model)

    variants = {
        "torch_eager": lambda: baseline("torch_eager", None),
        "fact": lambda: fact_variant("fact", None),
        "torch_compile": lambda: baseline("torch_compile", None),
        "torch_compile_max_autotune": lambda: baseline("torch_compile_max_autotune", "max-autotune"),
        "torch_compile_sdpa": lambda: baseline("torch_compile_sdpa", None, twin(model)),
        "fact_attention_only": lambda: fact_variant("fact_attention_only", ["attention"]),
        "fact_gemms_only": lambda: fact_variant("fact_gemms_only", GEMM_PATTERNS),
        "fact_cuda_graphs": lambda: fact_variant("fact_cuda_graphs", None, cuda_graphs=True),
        "fact_no_rope": lambda: fact_variant("fact_no_rope",
                                             [p for p in ("attention", *GEMM_PATTERNS) if p != "rope"]),
        "fact_rmsnorm": lambda: fact_planned_variant("fact_rmsnorm", RMSNORM_PATTERNS),
    }
    if dtype == "float32":
        # The float32 block in tf32 too: FACT planned in precision tf32 (TF32 GEMMs and attention)
        # against eager with TF32 allowed (the tf32 mode's comparison).
        variants["fact_tf32"] = lambda: fact_planned_variant("fact_tf32", None, precision="tf32")
        variants["torch_eager_tf32"] = lambda: baseline("torch_eager_tf32", None)
    if twin is None:
        del variants["torch_compile_sdpa"]
    try:
        # Build and verify every variant first (each kept alive in `built`) ...
        for key, build in variants.items():
            if run.args.variants and key not in run.args.variants:
                continue
            needed = EXPECTED_SECONDS[key] + TIMING_SECONDS
            if run.left() < needed:
                case["skipped"][key] = f"time budget: {run.left():.0f}s left, about {needed}s needed"
                run.log(f"{name}: {key} skipped ({case['skipped'][key]})")
                continue
            run.log(f"{name}: {key} ...")
            try:
                run.log(f"{name}: built {key} ({build()})")
            except Exception as error:  # noqa: BLE001 - a variant that fails is recorded, not fatal
                built.pop(key, None)
                case["skipped"][key] = f"failed: {first_line(error)}"
                run.log(f"{name}: {key} failed: {first_line(error)}")
                traceback.print_exc()
            finally:
                gc.collect()
                torch.cuda.empty_cache()
            run.save()
        # ... then time them together, interleaved, so every ratio between them comes from the
        # same rounds (the GPU's clock drift falls on all alike).
        timing = time_together(run, name, case, {key: fn for key, (fn, _) in built.items()},
                               device, warmup, iters, flusher)
        for key, stats in timing.items():
            case["timing"][key] = stats
            built[key][1](stats)
        if timing:
            run.log(f"{name}: timed interleaved: "
                    + ", ".join(f"{key} {stats['median_ms']:.3f} ms" for key, stats in timing.items()))
        if run.args.profile and device.type == "cuda":
            for key in timing:
                if key in PROFILED:
                    try:
                        case["profile"][key] = kernel_profile(built[key][0], device)
                    except Exception as error:  # noqa: BLE001 - a profile is extra
                        run.log(f"{name}: profile of {key} failed: {first_line(error)}")
    finally:
        built.clear()  # the compiled modules of this case go before the next case is built
        gc.collect()
        torch.cuda.empty_cache()
    case["status"] = "ok" if case["fact_ms"] and case["rel_err"] is not None else "incomplete"
    finish(case)
    run.save()


def time_together(run: Run, name: str, case: dict, fns: dict[str, Callable[[], object]], device: torch.device,
                  warmup: int, iters: int, flusher: L2Flusher) -> dict[str, dict]:
    """time_interleaved of the built variants (under no_grad), each stats' to_json. When a round
    raises, each variant runs once alone: those that fail are recorded as skipped and the rest
    are timed together again (never one by one: every time comes from interleaved rounds)."""
    fns = dict(fns)
    while fns:
        try:
            with torch.no_grad():
                return {key: stats.to_json()
                        for key, stats in time_interleaved(fns, device, warmup, iters, flusher).items()}
        except Exception as error:  # noqa: BLE001
            run.log(f"{name}: interleaved timing failed: {first_line(error)}; running each variant alone")
            failing = {}
            for key, fn in fns.items():
                try:
                    with torch.no_grad():
                        fn()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                except Exception as alone:  # noqa: BLE001
                    failing[key] = first_line(alone)
            if not failing:
                raise
            for key, why in failing.items():
                case["skipped"][key] = f"failed while timed: {why}"
                run.log(f"{name}: {key} failed while timed: {why}")
                del fns[key]
    return {}


def time_interleaved(fns: dict[str, Callable[[], object]], device: torch.device, warmup: int, iters: int,
                     flusher: L2Flusher) -> dict[str, TimingStats]:
    """Every function timed together in rounds, the order rotating from round to round, so that
    the GPU's clock drift falls on all of them alike: fact.timing.time_cuda_interleaved on a CUDA
    device (CUDA events, L2 flushed before each run). On the CPU (the smoke test) the same rounds
    with time.perf_counter around each run."""
    if device.type == "cuda":
        return time_cuda_interleaved(fns, warmup, iters, flusher)
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(iters):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            fns[name]()
            samples[name].append((time.perf_counter() - start) * 1e3)
    timer = f"time.perf_counter, {warmup} warm-up + {iters} timed runs (CPU)" + (
        f", interleaved with {', '.join(names)} (order rotating each round)" if len(names) > 1 else "")
    return {name: summarize(values, timer) for name, values in samples.items()}


def _with_tf32(model, inputs):
    """model(*inputs) with TF32 allowed for matmuls and convolutions (PyTorch's opt-in), the
    flags restored after."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        return model(*inputs)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _compiled(model, inputs, mode):
    compiled = torch.compile(copy.deepcopy(model), mode=mode)
    with torch.no_grad():
        compiled(*inputs)  # compile outside the timed runs
    return compiled


# Baselines that run in another precision than the model's dtype gives (eager with TF32 allowed):
# FACT is compared with them only where it ran in that precision too, so no ratio counts a
# precision change as a speedup.
BASELINE_PRECISION = {"torch_eager_tf32": "tf32"}


def finish(case: dict) -> None:
    """Speedups of FACT against each baseline of its precision, and each pattern's share against
    eager."""
    def same_precision(key: str, precision) -> bool:
        return BASELINE_PRECISION.get(key, case["precision"]) == precision

    if case["fact_ms"]:
        case["speedup"] = {k: b["ms"] / case["fact_ms"] for k, b in case["baselines"].items()
                           if b.get("ms") and same_precision(k, case["precision"])}
    eager = case["baselines"].get("torch_eager", {}).get("ms")
    eager_tf32 = case["baselines"].get("torch_eager_tf32", {}).get("ms")
    for entry in case["ablation"].values():
        precision = entry.get("precision", case["precision"])
        if eager and entry.get("ms") and same_precision("torch_eager", precision):
            entry["speedup_vs_eager"] = eager / entry["ms"]
        if eager_tf32 and entry.get("ms") and same_precision("torch_eager_tf32", precision):
            entry["speedup_vs_eager_tf32"] = eager_tf32 / entry["ms"]
    # Each pattern's share of the time FACT saves over eager (attention only and GEMMs only need
    # not add up to all: the remainders Inductor compiles differ).
    if eager and "all" in case["ablation"]:
        saved = eager - case["ablation"]["all"]["ms"]
        for key, entry in case["ablation"].items():
            if key not in ("all", "cuda_graphs", "tf32") and saved > 0:
                entry["share_of_saving"] = (eager - entry["ms"]) / saved


def table(doc: dict) -> str:
    lines = [f"blocks on {doc['device']} ({doc['date']}):"]
    for case in doc["cases"]:
        lines.append(f"  {case['name']} ({case['precision']}), shape {case['shape']}, FACT rel_err vs float64 "
                     f"{case['rel_err'] if case['rel_err'] is None else format(case['rel_err'], '.2e')}")
        rows = [("torch eager", case["baselines"].get("torch_eager", {}).get("ms")),
                ("torch.compile", case["baselines"].get("torch_compile", {}).get("ms")),
                ("torch.compile max-autotune", case["baselines"].get("torch_compile_max_autotune", {}).get("ms")),
                ("torch.compile, SDPA attention", case["baselines"].get("torch_compile_sdpa", {}).get("ms")),
                ("FACT (all patterns)", case["fact_ms"]),
                ("FACT attention only", case["ablation"].get("attention_only", {}).get("ms")),
                ("FACT GEMMs only", case["ablation"].get("gemms_only", {}).get("ms")),
                ("FACT in a CUDA graph", case["ablation"].get("cuda_graphs", {}).get("ms")),
                ("FACT without rope", case["ablation"].get("no_rope", {}).get("ms")),
                ("FACT with the RMSNorm fold", case["ablation"].get("rmsnorm", {}).get("ms")),
                ("torch eager, TF32 allowed", case["baselines"].get("torch_eager_tf32", {}).get("ms")),
                ("FACT in precision tf32", case["ablation"].get("tf32", {}).get("ms"))]
        for label, ms in rows:
            if ms is None:
                lines.append(f"    {label:<28}        -")
                continue
            # TF32-allowed eager against FACT in tf32; every other baseline against FACT (all patterns).
            mine = case["ablation"].get("tf32", {}).get("ms") if "TF32" in label else case["fact_ms"]
            ratio = f"  FACT x{ms / mine:.2f}" if mine and label.startswith("torch") else ""
            lines.append(f"    {label:<28} {ms:8.3f} ms{ratio}")
        for key, why in case["skipped"].items():
            lines.append(f"    ({key}: {why})")
        for item in case["left_to_pytorch"]:
            lines.append(f"    left to PyTorch: {item}")
        for key, prof in case.get("profile", {}).items():
            top = ", ".join(f"{k['kernel'][:48]} {k['ms']:.3f}" for k in prof["kernels"][:5])
            lines.append(f"    profile {key}: kernels {prof['total_ms']:.3f} ms per call; {top}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", required=True, help="a package fact optimize wrote")
    parser.add_argument("--out-dir", default="bench/results")
    parser.add_argument("--time-budget", type=float, default=480.0)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--flush-mb", type=int, default=256)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke test)")
    parser.add_argument("--variants", default="", help="comma-separated variants to run (default: all)")
    parser.add_argument("--profile", action="store_true",
                        help="record each FACT and torch.compile variant's CUDA kernels (torch.profiler)")
    args = parser.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(args.variants) - set(EXPECTED_SECONDS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(EXPECTED_SECONDS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_blocks: no CUDA GPU here: nothing measured")
        return 0
    run = Run(args)
    for package in args.package:
        package = Path(package)
        if not (package / "package.json").is_file():
            run.doc["notes"].append(f"{package}: no package.json (fact optimize failed?)")
            continue
        try:
            run_package(run, package)
        except Exception as error:  # noqa: BLE001
            run.doc["notes"].append(f"{package}: {first_line(error)}")
            traceback.print_exc()
        run.save()
    run.save()
    print(table(run.doc))
    print(f"wrote {run.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
