#!/usr/bin/env python3
"""End-to-end benchmark of fact.optimize on the minGPT-style block (bench/models/mingpt_block.py).

Stages (--stages, in this order; each one is wrapped so that a failure is recorded and the next
still runs; the results file and the report are rewritten after every stage):

  verify     per precision mode (strict: float32 model; tf32: float32 model, TF32 allowed;
             native: bfloat16 model): optimize, then on fresh inputs (a new seed, full size)
             compare the composed output and the original module's output with the original
             module run in float64 on the same device; ‖out − ref‖ / ‖ref‖; pass when FACT's
             error is at most --error-factor × PyTorch's own error in that mode.
  timing     bf16: eager, torch.compile (default), torch.compile(mode="max-autotune"), FACT with
             remainder="eager", remainder="inductor", and cuda_graphs=True; same process, same
             inputs; speedups of each FACT variant against each PyTorch one.
  subgraphs  each composed replacement alone: its fact::launch calls on the values its inputs
             take in the block, against the subgraph it replaced (lifted out of the exported
             graph) in eager and under torch.compile(mode="max-autotune").
  ablation   FACT with each composed rule alone (patterns=[rule]), then all, bf16, against eager.
  overhead   host time per forward at a tiny size (GPU work negligible): eager, FACT (remainder
             eager), FACT with CUDA graphs.

Writes <out-dir>/compose-<device slug>-<date>[-<variant>].json (shape: docs/), the readable report
<same stem>.md and, with matplotlib, <stem>-speedup.png and <stem>-ablation.png.

Usage (device: python3 there; here: $V/bin/python):
  PYTHONPATH=python python3 bench/compose/run_block.py [--stages verify,timing,...]
      [--time-budget SECONDS] [--out-dir bench/results] [--device cuda|cpu] [--batch 128 ...]
--time-budget: stages (and the variants inside them) that would start after this many seconds
are skipped and recorded as skipped. SIGINT/SIGTERM stop the run after writing what it has.
"""
from __future__ import annotations

import argparse
import copy
import gc
import inspect
import math
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
for extra_path in (HERE, REPO_ROOT / "bench" / "models", REPO_ROOT / "python"):
    if str(extra_path) not in sys.path:
        sys.path.append(str(extra_path))

import torch  # noqa: E402

import fact  # noqa: E402
from compose_report import render_report  # noqa: E402
from compose_results import ResultsFile, make_case  # noqa: E402
from compose_subgraphs import relative_error as outputs_error, replacement_subgraphs  # noqa: E402
from fact.timing import L2Flusher, cpu_time_per_call, time_device  # noqa: E402
from mingpt_block import MinGPTBlock  # noqa: E402

STAGES = ("verify", "timing", "subgraphs", "ablation", "overhead")
MODES = ("strict", "tf32", "native")
TORCH_VARIANTS = ("eager", "compile", "max_autotune")
FACT_VARIANTS = ("fact_eager", "fact_inductor", "fact_cuda_graphs")
BASELINE_NAMES = {"eager": "torch_eager", "compile": "torch_compile",
                  "max_autotune": "torch_compile_max_autotune"}
# What fact.optimize did before it had these options: an option it does not accept may be left
# out when the wanted value is this one (and only then).
BEHAVIOUR_WITHOUT_OPTION = {"remainder": "eager", "cuda_graphs": False, "tune": 0, "patterns": None,
                            "speed_guard": False}
FALLBACK_WARNING = "fact: inputs"


class OptionNotAccepted(RuntimeError):
    """fact.optimize does not accept an option this measurement needs."""


class TimeBudgetSpent(RuntimeError):
    pass


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float | None:
    """‖out − ref‖ / ‖ref‖ in float64; None when not finite."""
    value = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    return value if math.isfinite(value) else None


def first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return (text.splitlines() or [text])[0][:400]


def report_json(composed) -> dict:
    report = getattr(composed, "fact_report", None)
    if report is None:
        return {}
    try:
        return report.to_json()
    except Exception as error:  # noqa: BLE001 - a report that cannot serialize is shown as text
        return {"text": str(report), "to_json_error": first_line(error)}


def composed_summary(report: dict) -> list[str]:
    """One line per composed call: "rule: summary [kernel configuration]"."""
    return [f"{c.get('rule', '?')}: {call.get('summary', '?')}"
            + (f" [{call['config']}]" if call.get("config") else "")
            for c in report.get("composed", []) for call in c.get("calls", [])]


def degradation(report: dict, options: dict) -> str:
    """Why the composed module does not run the way `options` asked (the report's remainder /
    cuda_graphs say so), or ''."""
    problems = []
    remainder = str(report.get("remainder", ""))
    if options.get("remainder") == "inductor" and remainder and remainder != "inductor":
        problems.append(f"remainder {remainder}")
    cuda_graphs = str(report.get("cuda_graphs", ""))
    if options.get("cuda_graphs") and cuda_graphs and cuda_graphs != "on":
        problems.append(f"CUDA graphs {cuda_graphs}")
    return "; ".join(problems)


def matmul_precision_for(mode: str) -> str:
    return "high" if mode == "tf32" else "highest"


class BlockBenchmark:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = torch.device(args.device)
        self.start = time.monotonic()
        self.work_root = Path(args.work_dir or tempfile.mkdtemp(prefix="fact_compose_work_"))
        self.work_root.mkdir(parents=True, exist_ok=True)
        self.flusher = L2Flusher(args.flush_mb, self.device) if self.device.type == "cuda" else None
        self.state: dict[str, Any] = {}
        self.interrupted = False
        self.optimize_parameters = inspect.signature(fact.optimize).parameters
        self.results = ResultsFile(Path(args.out_dir), self.device, self.setup(), date=args.date,
                                   variant=args.variant)

    # ---------------------------------------------------------------------------------------
    # Helpers

    def setup(self) -> dict:
        a = self.args
        return {
            "model": "bench/models/mingpt_block.py:MinGPTBlock",
            "batch": a.batch, "seq_len": a.seq_len, "embed": a.embed, "heads": a.heads,
            "device": str(self.device), "stages": a.stages, "time_budget_s": a.time_budget,
            "warmup": a.warmup, "iters": a.iters, "flush_mb": a.flush_mb if self.device.type == "cuda" else 0,
            "tune": a.tune, "error_factor": a.error_factor, "verify_remainder": a.verify_remainder,
            "ablation_remainder": a.ablation_remainder, "cuda_graphs_remainder": a.cuda_graphs_remainder,
            "overhead": {"batch": a.overhead_batch, "seq_len": a.overhead_seq_len,
                         "calls": a.overhead_calls, "repeats": a.overhead_repeats},
            "variants": a.variants, "modes": a.modes, "seed": a.seed,
            "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
            "work_dir": str(self.work_root),
            "timing_note": (
                "CUDA events around each run after warm-up; before each timed run the L2 cache is "
                f"flushed by writing {a.flush_mb} MiB (outside the events); median and p10-p90 of "
                "the runs" if self.device.type == "cuda" else
                "time.perf_counter around each run (CPU run: no L2 flush, no CUDA events)"),
        }

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():7.1f}s] {message}", flush=True)

    def check_budget(self, what: str) -> None:
        if self.elapsed() >= self.args.time_budget:
            raise TimeBudgetSpent(f"time budget ({self.args.time_budget:.0f} s) spent before {what}")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def free_memory(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def block(self, dtype: torch.dtype, batch: int | None = None, seq_len: int | None = None):
        """(model, input): the block with seed-determined weights, and an input of the seed+1."""
        a = self.args
        torch.manual_seed(a.seed)
        model = MinGPTBlock(embed=a.embed, heads=a.heads, max_seq_len=a.seq_len)
        model = model.to(device=self.device, dtype=dtype).eval()
        x = self.random_input(dtype, a.seed + 1, batch or a.batch, seq_len or a.seq_len)
        return model, x

    def random_input(self, dtype: torch.dtype, seed: int, batch: int | None = None,
                     seq_len: int | None = None) -> torch.Tensor:
        generator = torch.Generator(device=self.device).manual_seed(seed)
        shape = (batch or self.args.batch, seq_len or self.args.seq_len, self.args.embed)
        return torch.randn(shape, generator=generator, device=self.device, dtype=torch.float32).to(dtype)

    @staticmethod
    def float64_reference(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The module's own weights (whatever their dtype), run in float64 on their device."""
        with torch.no_grad():
            return copy.deepcopy(model).double()(x.double())

    def optimize(self, model, inputs: tuple, precision: str, label: str, **options):
        """fact.optimize with `options`; an option the current fact.optimize does not accept is
        left out when its wanted value is the behaviour it has without it, else
        OptionNotAccepted."""
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in self.optimize_parameters.values())
        passed, refused = {}, []
        for name, value in options.items():
            if accepts_any or name in self.optimize_parameters:
                passed[name] = value
            elif name in BEHAVIOUR_WITHOUT_OPTION and BEHAVIOUR_WITHOUT_OPTION[name] == value:
                continue
            else:
                refused.append(f"{name}={value!r}")
        if refused:
            raise OptionNotAccepted(f"fact.optimize does not accept {', '.join(refused)} yet "
                                    f"(python/fact/compose/)")
        work_dir = self.work_root / label
        started = time.perf_counter()
        composed = fact.optimize(model, inputs, precision, work_dir=work_dir, **passed)
        seconds = time.perf_counter() - started
        self.results.add_report(label, report_json(composed))
        self.log(f"  optimize {label}: {seconds:.1f} s, {len(composed.fact_report.composed)} replacement(s) composed")
        return composed, seconds

    def fact_options(self, **options) -> dict:
        options.setdefault("tune", self.args.tune)
        options.setdefault("cuda_graphs", False)  # the variant fact_cuda_graphs names them
        options.setdefault("speed_guard", False)  # the raw composed module is what is measured
        return options

    def timed(self, fn: Callable[[], Any]):
        return time_device(fn, self.device, self.args.warmup, self.args.iters, self.flusher)

    def first_call(self, fn: Callable[[], Any]) -> tuple[Any, float, list[str]]:
        """(output (a tensor or a tuple of them), seconds, fact fallback warnings) of the first
        call."""
        started = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad():
                out = fn()
            self.sync()
        fallbacks = [str(w.message) for w in caught if str(w.message).startswith(FALLBACK_WARNING)]
        out = (tuple(t.detach().clone() for t in out) if isinstance(out, (tuple, list))
               else out.detach().clone())
        return out, time.perf_counter() - started, fallbacks

    # ---------------------------------------------------------------------------------------
    # Stages

    def stage_verify(self) -> str:
        problems = []
        for mode in self.args.modes:
            name = f"verify_block_{mode}"
            try:
                self.check_budget(f"verification '{mode}'")
            except TimeBudgetSpent as spent:
                self.results.add_case(make_case(name, mode, "verify", status="skipped", reason=str(spent)))
                problems.append(f"{mode}: skipped")
                continue
            if mode == "tf32" and self.device.type != "cuda":
                self.results.add_case(make_case(name, mode, "verify", status="skipped",
                                                reason="tf32 needs a CUDA device (TF32 tensor cores)"))
                continue
            try:
                case = self.verify_mode(mode)
            except Exception as error:  # noqa: BLE001 - recorded, next mode runs
                traceback.print_exc()
                case = make_case(name, mode, "verify", status="error", reason=first_line(error))
            self.results.add_case(case)
            if case["status"] != "ok":
                problems.append(f"{mode}: {case['status']}")
            self.results.write()
            self.free_memory()
        return "; ".join(problems)

    def verify_mode(self, mode: str) -> dict:
        self.log(f"verify {mode}")
        torch.set_float32_matmul_precision(matmul_precision_for(mode))
        dtype = torch.bfloat16 if mode == "native" else torch.float32
        model, example = self.block(dtype)
        composed, optimize_s = self.optimize(model, (example,), mode, f"verify-{mode}",
                                             **self.fact_options(remainder=self.args.verify_remainder))
        fresh = self.random_input(dtype, self.args.seed + 1000)
        got, _, fallbacks = self.first_call(lambda: composed(fresh))
        want, _, _ = self.first_call(lambda: model(fresh))
        reference = self.float64_reference(model, fresh)
        fact_error, torch_error = relative_error(got, reference), relative_error(want, reference)
        del reference, got, want
        report = composed.fact_report
        criterion = f"FACT rel_err <= {self.args.error_factor:g} x PyTorch's rel_err ({mode})"
        passed = (fact_error is not None and torch_error is not None
                  and fact_error <= self.args.error_factor * torch_error)
        status, reason = "ok", ""
        if fallbacks:
            status, reason = "fallback", fallbacks[0]
        elif not passed:
            status, reason = "failed", (f"{criterion} does not hold: fact {fact_error}, torch {torch_error}")
        self.log(f"  {mode}: fact rel_err {fact_error}, torch {torch_error}: {status}")
        return make_case(
            f"verify_block_{mode}", mode, "verify", rel_err=fact_error,
            baselines={"torch_eager": {"ms": None, "rel_err": torch_error}},
            config="; ".join(composed_summary(report_json(composed))), status=status, reason=reason,
            verification={"passed": passed and not fallbacks, "criterion": criterion,
                          "fact_rel_err": fact_error, "torch_rel_err": torch_error,
                          "optimize_s": optimize_s, "dtype": str(dtype).replace("torch.", ""),
                          "inputs": f"fresh randn, seed {self.args.seed + 1000}, the benchmark size",
                          "remainder": self.args.verify_remainder,
                          "composed": len(report.composed), "left_to_pytorch": len(report.left_to_pytorch)})

    def build_variant(self, variant: str, model, x):
        """(callable, optimize seconds or None, composed module or None, how it deviates from
        what was asked or '')."""
        if variant == "eager":
            return (lambda: model(x)), None, None, ""
        if variant == "compile":
            compiled = torch.compile(model)
            return (lambda: compiled(x)), None, None, ""
        if variant == "max_autotune":
            compiled = torch.compile(model, mode="max-autotune")
            return (lambda: compiled(x)), None, None, ""
        if variant == "fact_eager":
            options = self.fact_options(remainder="eager")
        elif variant == "fact_inductor":
            options = self.fact_options(remainder="inductor")
        elif variant == "fact_cuda_graphs":
            if self.device.type != "cuda":
                raise OptionNotAccepted("CUDA graphs need a CUDA device")
            options = self.fact_options(remainder=self.args.cuda_graphs_remainder, cuda_graphs=True)
        else:
            raise ValueError(f"unknown variant '{variant}'")
        composed, optimize_s = self.optimize(model, (x,), "native", f"timing-{variant}", **options)
        return (lambda: composed(x)), optimize_s, composed, degradation(report_json(composed), options)

    def stage_timing(self) -> str:
        torch.set_float32_matmul_precision("highest")
        model, x = self.block(torch.bfloat16)
        self.state["native"] = (model, x)
        reference = self.float64_reference(model, x)
        measured: dict[str, dict] = {}
        for variant in self.args.variants:
            entry: dict[str, Any] = {"variant": variant}
            measured[variant] = entry
            try:
                self.check_budget(f"timing '{variant}'")
                self.log(f"timing {variant}")
                fn, optimize_s, composed, degraded = self.build_variant(variant, model, x)
                out, first_s, fallbacks = self.first_call(fn)
                entry.update(optimize_s=optimize_s, first_call_s=first_s, rel_err=relative_error(out, reference))
                if fallbacks:
                    raise RuntimeError(f"the composed module fell back to the original: {fallbacks[0]}")
                with torch.no_grad():
                    stats = self.timed(fn)
                entry.update(status="degraded" if degraded else "ok", stats=stats.to_json())
                if degraded:
                    entry["reason"] = degraded
                if composed is not None:
                    report = report_json(composed)
                    entry.update(composed=composed_summary(report), remainder=report.get("remainder"),
                                 cuda_graphs=report.get("cuda_graphs"))
                    if variant == "fact_eager":
                        self.state["fact_eager"] = composed
                self.log(f"  {variant}: {stats.median_ms:.4f} ms (p10 {stats.p10_ms:.4f}, p90 "
                         f"{stats.p90_ms:.4f}), rel_err {entry['rel_err']}")
            except TimeBudgetSpent as spent:
                entry.update(status="skipped", reason=str(spent))
            except Exception as error:  # noqa: BLE001 - recorded, the next variant runs
                if not isinstance(error, OptionNotAccepted):
                    traceback.print_exc()
                entry.update(status="error", reason=first_line(error))
                self.log(f"  {variant}: {entry['reason']}")
            self.free_memory()
        del reference
        baselines = {BASELINE_NAMES[v]: self.baseline_entry(measured[v]) for v in TORCH_VARIANTS
                     if v in measured}
        for variant in FACT_VARIANTS:
            if variant not in measured:
                continue
            entry = measured[variant]
            ok = entry.get("status") in ("ok", "degraded")
            self.results.add_case(make_case(
                f"block_bf16_{variant}", "native", "timing",
                fact_ms=entry["stats"]["median_ms"] if ok else None, rel_err=entry.get("rel_err"),
                baselines=baselines, config="; ".join(entry.get("composed", [])),
                status=entry.get("status", "error"), reason=entry.get("reason", ""),
                timing=entry.get("stats"), optimize_s=entry.get("optimize_s"),
                first_call_s=entry.get("first_call_s"), remainder=entry.get("remainder"),
                cuda_graphs=entry.get("cuda_graphs")))
        self.results.doc["timing_variants"] = measured
        problems = [f"{v}: {e.get('status')}" for v, e in measured.items() if e.get("status") != "ok"]
        return "; ".join(problems)

    @staticmethod
    def baseline_entry(entry: dict) -> dict:
        stats = entry.get("stats") or {}
        result = {"ms": stats.get("median_ms"), "rel_err": entry.get("rel_err")}
        for key in ("p10_ms", "p90_ms", "min_ms", "max_ms", "runs"):
            if key in stats:
                result[key] = stats[key]
        result["first_call_s"] = entry.get("first_call_s")
        if entry.get("status") != "ok":
            result["status"], result["reason"] = entry.get("status"), entry.get("reason", "")
        return result

    def native_composed(self):
        """(model, x, composed with remainder eager), from the timing stage when it ran."""
        if "native" not in self.state:
            self.state["native"] = self.block(torch.bfloat16)
        model, x = self.state["native"]
        if "fact_eager" not in self.state:
            composed, _ = self.optimize(model, (x,), "native", "native-eager",
                                        **self.fact_options(remainder="eager"))
            self.state["fact_eager"] = composed
        return model, x, self.state["fact_eager"]

    def stage_subgraphs(self) -> str:
        torch.set_float32_matmul_precision("highest")
        _, x, composed = self.native_composed()
        if getattr(composed, "graph_module", None) is None:
            raise RuntimeError("the composed module has no rewritten FX graph (nothing composed?)")
        cases = replacement_subgraphs(composed, (x,))
        self.log(f"subgraphs: {len(cases)} replacement(s)")
        wanted = [v for v in ("eager", "max_autotune") if v in self.args.variants]
        problems = []
        for index, subgraph in enumerate(cases):
            name = f"subgraph_{index}_{subgraph.name}"
            try:
                self.check_budget(name)
                case = self.measure_subgraph(name, subgraph, wanted)
            except TimeBudgetSpent as spent:
                case = make_case(name, "native", "subgraphs", status="skipped", reason=str(spent))
            except Exception as error:  # noqa: BLE001
                traceback.print_exc()
                case = make_case(name, "native", "subgraphs", status="error", reason=first_line(error))
            if case["status"] != "ok":
                problems.append(f"{name}: {case['status']}")
            self.results.add_case(case)
            self.results.write()
            self.free_memory()
        return "; ".join(problems)

    def measure_subgraph(self, name: str, subgraph, wanted: list[str]) -> dict:
        self.log(f"  {name} ({subgraph.summary})")
        reference = subgraph.reference()
        out, _, _ = self.first_call(lambda: subgraph.run())
        fact_error = outputs_error(out, reference)
        with torch.no_grad():
            fact_stats = self.timed(subgraph.run)
        baselines = {}
        for variant in wanted:
            try:
                self.check_budget(f"{name} {variant}")
                runner = subgraph.module if variant == "eager" else torch.compile(subgraph.module,
                                                                                  mode="max-autotune")
                fn = (lambda runner=runner: tuple(runner(*subgraph.tensors)))
                out, first_s, _ = self.first_call(fn)
                with torch.no_grad():
                    stats = self.timed(fn)
                baselines[BASELINE_NAMES[variant]] = {
                    "ms": stats.median_ms, "rel_err": outputs_error(out, reference),
                    "p10_ms": stats.p10_ms, "p90_ms": stats.p90_ms, "runs": stats.runs,
                    "first_call_s": first_s}
            except Exception as error:  # noqa: BLE001 - that baseline is missing, the case stays
                if not isinstance(error, TimeBudgetSpent):
                    traceback.print_exc()
                baselines[BASELINE_NAMES[variant]] = {"ms": None, "rel_err": None,
                                                     "status": "error", "reason": first_line(error)}
        del reference
        autotuned = baselines.get("torch_compile_max_autotune", {}).get("ms")
        self.log(f"    fact {fact_stats.median_ms:.4f} ms" + "".join(
            f", {b} {e['ms']:.4f} ms" for b, e in baselines.items() if e.get("ms")))
        return make_case(
            name, "native", "subgraphs", fact_ms=fact_stats.median_ms, rel_err=fact_error,
            baselines=baselines, config="; ".join(k for k in subgraph.kernels if k) or "host reference",
            timing=fact_stats.to_json(), label=subgraph.label, rule=subgraph.rule,
            summary=subgraph.summary, shapes=subgraph.shapes,
            at_least_as_fast_as_max_autotune=(fact_stats.median_ms <= autotuned) if autotuned else None)

    def stage_ablation(self) -> str:
        torch.set_float32_matmul_precision("highest")
        model, x, composed_all = self.native_composed()
        rules = self.args.ablation_rules or list(dict.fromkeys(
            c.rule for c in composed_all.fact_report.composed))
        self.log(f"ablation over rules {rules} (remainder {self.args.ablation_remainder})")
        reference = self.float64_reference(model, x)
        with torch.no_grad():
            eager_stats = self.timed(lambda: model(x))
            eager_out = model(x)
        eager = {"ms": eager_stats.median_ms, "rel_err": relative_error(eager_out, reference),
                 "p10_ms": eager_stats.p10_ms, "p90_ms": eager_stats.p90_ms, "runs": eager_stats.runs}
        problems = []
        for rule in rules + ["all"]:
            name = f"ablation_{rule}"
            try:
                self.check_budget(name)
                patterns = None if rule == "all" else [rule]
                composed, optimize_s = self.optimize(
                    model, (x,), "native", f"ablation-{rule}",
                    **self.fact_options(remainder=self.args.ablation_remainder, patterns=patterns))
                fn = (lambda composed=composed: composed(x))
                out, _, fallbacks = self.first_call(fn)
                if fallbacks:
                    raise RuntimeError(f"the composed module fell back to the original: {fallbacks[0]}")
                with torch.no_grad():
                    stats = self.timed(fn)
                summary = composed_summary(report_json(composed))
                case = make_case(name, "native", "ablation", fact_ms=stats.median_ms,
                                 rel_err=relative_error(out, reference),
                                 baselines={"torch_eager": eager}, config="; ".join(summary),
                                 timing=stats.to_json(), patterns=patterns, composed=summary,
                                 optimize_s=optimize_s)
                self.log(f"  {rule}: {stats.median_ms:.4f} ms ({len(summary)} call(s))")
            except TimeBudgetSpent as spent:
                case = make_case(name, "native", "ablation", status="skipped", reason=str(spent),
                                 baselines={"torch_eager": eager})
            except Exception as error:  # noqa: BLE001
                if not isinstance(error, OptionNotAccepted):
                    traceback.print_exc()
                case = make_case(name, "native", "ablation", status="error", reason=first_line(error),
                                 baselines={"torch_eager": eager})
                self.log(f"  {rule}: {case['reason']}")
            if case["status"] != "ok":
                problems.append(f"{rule}: {case['status']}")
            self.results.add_case(case)
            self.results.write()
            self.free_memory()
        return "; ".join(problems)

    def stage_overhead(self) -> str:
        a = self.args
        torch.set_float32_matmul_precision("highest")
        model, x = self.block(torch.bfloat16, a.overhead_batch, a.overhead_seq_len)
        label = f"{a.overhead_batch}x{a.overhead_seq_len}x{a.embed}"
        # "same_graph": the module's exported graph (the one FACT rewrites) run eagerly, with no
        # FACT op and no guard: what the composed module's host time is compared against.
        variants = {"eager": None,
                    "same_graph": None,
                    "fact_eager": self.fact_options(remainder="eager"),
                    "fact_cuda_graphs": self.fact_options(remainder="eager", cuda_graphs=True)}
        measured: dict[str, Any] = {}
        for variant, options in variants.items():
            try:
                self.check_budget(f"overhead '{variant}'")
                if variant == "fact_cuda_graphs" and self.device.type != "cuda":
                    raise OptionNotAccepted("CUDA graphs need a CUDA device")
                if variant == "same_graph":
                    with torch.no_grad():
                        graph = torch.export.export(model, (x,), strict=False).module(check_guards=False)
                    fn = (lambda graph=graph: graph.forward(x))
                elif options is None:
                    fn = (lambda: model(x))
                else:
                    composed, _ = self.optimize(model, (x,), "native", f"overhead-{variant}", **options)
                    if not composed.fact_report.composed:
                        raise RuntimeError("nothing was composed at the tiny size")
                    degraded = degradation(report_json(composed), options)
                    if degraded:
                        raise RuntimeError(f"not measured as asked: {degraded}")
                    fn = (lambda composed=composed: composed(x))
                _, _, fallbacks = self.first_call(fn)
                if fallbacks:
                    raise RuntimeError(f"the composed module fell back to the original: {fallbacks[0]}")
                with torch.no_grad():
                    stats = cpu_time_per_call(fn, self.device, warmup=20, calls=a.overhead_calls,
                                              repeats=a.overhead_repeats)
                measured[variant] = {"status": "ok", "stats": stats.to_json()}
                self.log(f"  overhead {variant}: {stats.median_ms * 1e3:.1f} us per forward")
            except Exception as error:  # noqa: BLE001
                if not isinstance(error, (OptionNotAccepted, TimeBudgetSpent)):
                    traceback.print_exc()
                status = "skipped" if isinstance(error, TimeBudgetSpent) else "error"
                measured[variant] = {"status": status, "reason": first_line(error)}
                self.log(f"  overhead {variant}: {first_line(error)}")
        eager = measured.get("eager", {})
        eager_ms = (eager.get("stats") or {}).get("median_ms")
        baselines = {"torch_eager": {"ms": eager_ms, "rel_err": None}}
        if eager.get("stats"):
            baselines["torch_eager"].update(p10_ms=eager["stats"]["p10_ms"], p90_ms=eager["stats"]["p90_ms"])
        same = (measured.get("same_graph", {}).get("stats") or {})
        same_ms = same.get("median_ms")
        if same_ms:
            baselines["torch_eager_same_graph"] = {"ms": same_ms, "rel_err": None,
                                                   "p10_ms": same["p10_ms"], "p90_ms": same["p90_ms"]}
        for variant in ("fact_eager", "fact_cuda_graphs"):
            entry = measured[variant]
            ms = (entry.get("stats") or {}).get("median_ms")
            self.results.add_case(make_case(
                f"overhead_{variant}_{label}", "native", "overhead", fact_ms=ms, baselines=baselines,
                status=entry["status"], reason=entry.get("reason", ""), timing=entry.get("stats"),
                host_us_per_forward=ms * 1e3 if ms else None,
                eager_host_us_per_forward=eager_ms * 1e3 if eager_ms else None,
                ratio_to_eager=(ms / eager_ms) if ms and eager_ms else None,
                ratio_to_same_graph=(ms / same_ms) if ms and same_ms else None))
        self.results.doc["overhead"] = {"size": label, "measured": measured}
        return "; ".join(f"{v}: {e['status']}" for v, e in measured.items() if e["status"] != "ok")

    # ---------------------------------------------------------------------------------------
    # Driver

    def run(self) -> int:
        self.log(f"compose benchmark on {self.results.doc['device']}; stages {','.join(self.args.stages)}; "
                 f"budget {self.args.time_budget:.0f} s; results {self.results.json_path}")
        for stage in STAGES:
            if stage not in self.args.stages:
                continue
            if self.interrupted:
                self.results.set_stage(stage, "skipped", 0.0, "the run was interrupted")
                continue
            if self.elapsed() >= self.args.time_budget:
                self.results.set_stage(stage, "skipped", 0.0,
                                       f"time budget ({self.args.time_budget:.0f} s) spent before the stage")
                self.log(f"stage {stage}: skipped (time budget)")
                continue
            started = time.monotonic()
            self.log(f"stage {stage}: start")
            status, reason = "ok", ""
            try:
                problems = getattr(self, f"stage_{stage}")()
                if problems:
                    status, reason = "partial", problems
            except KeyboardInterrupt:
                status, reason, self.interrupted = "interrupted", "SIGINT/SIGTERM during the stage", True
            except Exception as error:  # noqa: BLE001 - recorded; the next stage runs
                traceback.print_exc()
                status, reason = "error", first_line(error)
            seconds = time.monotonic() - started
            self.results.set_stage(stage, status, seconds, reason)
            self.write_outputs(plots=False)
            self.log(f"stage {stage}: {status} in {seconds:.1f} s{': ' + reason if reason else ''}")
            self.free_memory()
        self.write_outputs(plots=not self.args.no_plots)
        self.log(f"wrote {self.results.json_path} and {self.results.report_path}")
        return 0

    def write_outputs(self, plots: bool) -> None:
        self.results.doc["elapsed_s"] = round(self.elapsed(), 1)
        if plots:
            self.results.doc["plots"] = self.make_plots()
        self.results.write()
        try:
            self.results.report_path.write_text(render_report(self.results.doc))
        except Exception:  # noqa: BLE001 - the JSON is written; the report error is shown
            traceback.print_exc()

    def make_plots(self) -> list[str]:
        try:
            from plot_compose import plot_all
        except ImportError as error:
            self.log(f"no plots: {error}")
            return []
        try:
            return [p.name for p in plot_all(self.results.doc, self.results.out_dir / self.results.stem)]
        except Exception:  # noqa: BLE001 - plots are optional
            traceback.print_exc()
            return []


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    listed = lambda allowed: (lambda text: _choices(text, allowed))  # noqa: E731
    parser.add_argument("--stages", type=listed(STAGES), default=list(STAGES),
                        help=f"comma-separated, of {','.join(STAGES)} (default all)")
    parser.add_argument("--modes", type=listed(MODES), default=list(MODES), help="precision modes to verify")
    parser.add_argument("--variants", type=listed(TORCH_VARIANTS + FACT_VARIANTS),
                        default=list(TORCH_VARIANTS + FACT_VARIANTS),
                        help="timing variants (eager and max_autotune also pick the subgraph baselines)")
    parser.add_argument("--time-budget", type=float, default=480.0, help="seconds; later stages are skipped")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out-dir", default=str(REPO_ROOT / "bench" / "results"))
    parser.add_argument("--work-dir", default=None, help="fact.optimize work folders (default: a temporary folder)")
    parser.add_argument("--date", default=None, help="results file date (default: today, UTC)")
    parser.add_argument("--variant", default="", help="results file name suffix for a partial run "
                        "(compose-<device>-<date>-<variant>.json)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--embed", type=int, default=768)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--flush-mb", type=int, default=256, help="L2 flush write per timed run (MiB)")
    parser.add_argument("--tune", type=int, default=0, help="fact.optimize(tune=...)")
    parser.add_argument("--error-factor", type=float, default=2.0,
                        help="verification passes when FACT's rel_err <= this x PyTorch's")
    parser.add_argument("--verify-remainder", choices=("eager", "inductor"), default="eager")
    parser.add_argument("--ablation-remainder", choices=("eager", "inductor"), default="eager")
    parser.add_argument("--cuda-graphs-remainder", choices=("eager", "inductor"), default="inductor")
    parser.add_argument("--ablation-rules", type=lambda t: [r for r in t.split(",") if r], default=None,
                        help="rules to ablate (default: the rules of the full composition)")
    parser.add_argument("--overhead-batch", type=int, default=1)
    parser.add_argument("--overhead-seq-len", type=int, default=16)
    parser.add_argument("--overhead-calls", type=int, default=200)
    parser.add_argument("--overhead-repeats", type=int, default=9)
    parser.add_argument("--no-plots", action="store_true")
    return parser.parse_args(argv)


def _choices(text: str, allowed: tuple[str, ...]) -> list[str]:
    chosen = [word.strip() for word in text.split(",") if word.strip()]
    unknown = [word for word in chosen if word not in allowed]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return chosen


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # One fresh Inductor cache per run (unless the caller chose one; Inductor reads it when it
    # first compiles): the block and its subgraphs share autotuning results, and nothing comes
    # from older runs.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="fact_compose_inductor_"))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("run_block.py: no CUDA device; use --device cpu for a CPU run", file=sys.stderr)
        return 2
    torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)

    def interrupt(signum, frame):  # noqa: ARG001 - SIGTERM ends the run like SIGINT
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    return BlockBenchmark(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
