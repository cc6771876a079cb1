#!/usr/bin/env python3
"""FACT on whole models, bf16 (precision "native"): transformers' GPT2LMHeadModel (124M),
LlamaForCausalLM (4 layers at a 1B-class width, GQA), BertModel with its pooler (BERT-base) and
torchvision's VisionTransformer (vit_b_16), each with every layer, its embeddings and its head,
random weights, built from corpus/whole_models.py (FULL_MODELS; --small: the CPU test sizes of
MODELS).

Per model, in one process:
  - fact.optimize(model, example, "native", tune=--tune, remainder="inductor") (its time:
    optimize_s; the report's own per-stage seconds too);
  - baselines: eager, torch.compile (default mode), torch.compile(mode="max-autotune") (each
    compiled on a copy of the model; the compile is timed as its first call). torch.compile is
    compiled before fact.optimize runs (a budget spent optimizing still leaves it measured),
    max-autotune after;
  - every variant checked against the original run in float64 on fresh inputs (new token ids /
    pixels, the example's shapes), each named output (logits, last_hidden_state, ...) within the
    conformance bound (fact.conformance.output_bound: 2e-2 in native, or 1.5x PyTorch's own
    error where that is larger);
  - all timed interleaved with the L2 flushed before each run (fact.timing.time_cuda_interleaved,
    as fact.conformance.gpu_case.run_gpu_case times a case), median of --iters;
  - with --profile (the default; CUDA only), FACT's and the compiled baselines' kernels per call
    under torch.profiler, split by who wrote them (fact.kernel_profile), the 30 largest named;
  - coverage (fact.conformance.coverage.coverage_row: the GEMM-FLOP share FACT runs), and the
    per-replacement kernel ratios: PyTorch's own run of a replacement's subgraph over FACT's
    calls (subgraph_ms / calls_ms, > 1: FACT faster), for the composed replacements and for the
    ones the speed guard left to PyTorch.
Summary: the geomean and minimum speedup against the fastest baseline, the GEMM-FLOP share,
the kernel ratios' distribution.

Every stage is wrapped: a failure is recorded (its stage and reason) and the rest runs. The
results file (<out-dir>/models-<device>-<date>[-<tag>].json, in the shape of
docs/architecture.md "Measuring") and its table (.md) are rewritten after every stage;
--time-budget S skips the models (and the max-autotune compiles) that would start after S
seconds; SIGINT / SIGTERM stop the run after writing what it has.

Usage (device): PYTHONPATH=python python3 bench/whole_models/run_whole_models.py
    [--models gpt2,llama,bert,vit] [--batch 8 | --batch gpt2=8,vit=32] [--size gpt2.n_layer=6]
    [--tune 2] [--no-max-autotune] [--time-budget 480] [--tag TAG] [--out-dir bench/results]
CPU smoke run: ... --device cpu --small --models gpt2 --remainder eager --no-compile
Redraw the table of a results file: ... --render bench/results/models-....json
Merge the files of several runs (one model per GPU or per call): ... --merge A.json B.json ...
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import signal
import sys
import time
import traceback
import warnings
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
if str(REPO_ROOT / "python") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "python"))

import torch  # noqa: E402

from fact.conformance.corpus import (_first_line, float64_output, load_file, load_json,  # noqa: E402
                                     output_bound, quiet_torch, relative_error)
from fact.conformance.coverage import _share, counted_gemm_flops, coverage_row  # noqa: E402
from fact.conformance.gpu_case import _log, device_slug  # noqa: E402
from fact.kernel_profile import kernel_profile  # noqa: E402
from fact.timing import L2Flusher, time_cuda_interleaved, time_device  # noqa: E402
from fact.versions import collect_versions  # noqa: E402

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from results import (BASELINES, SCHEMA, SUITE, _e, _ms, _ratio_text, _x,  # noqa: E402
                     kernel_ratios, merge_results, render_markdown, summarize)

PRECISION, DTYPE = "native", torch.bfloat16
WHOLE = load_file(REPO_ROOT / "corpus" / "whole_models.py")
# bench name -> (its CPU-size entry in WHOLE.MODELS, its full-size entry in WHOLE.FULL_MODELS)
BENCH_MODELS = {"gpt2": ("gpt2_lm", "gpt2_lm_full"),
                "llama": ("llama_causal_lm", "llama_causal_lm_full"),
                "bert": ("bert_pooler", "bert_pooler_full"),
                "vit": ("torchvision_vit", "torchvision_vit_full")}
EXAMPLE_SEED, FRESH_SEED = 1, 2


class _Failed:
    """What a stage that raised returns (None is a legitimate result)."""


FAILED = _Failed()


# ---------------------------------------------------------------------------------------------
# Models


def _int_map(text: str, what: str) -> dict[str, int]:
    """"8" -> {"*": 8}; "gpt2=8,vit=32" -> {"gpt2": 8, "vit": 32}."""
    if not text:
        return {}
    if "=" not in text:
        return {"*": int(text)}
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in BENCH_MODELS:
            raise SystemExit(f"{what}: unknown model '{name}' (one of {', '.join(BENCH_MODELS)})")
        out[name.strip()] = int(value)
    return out


def _size_overrides(items: Sequence[str]) -> dict[str, dict[str, int]]:
    """["gpt2.n_layer=2", "gpt2.seq=256"] -> {"gpt2": {"n_layer": 2, "seq": 256}}."""
    out: dict[str, dict[str, int]] = {}
    for item in items or []:
        for part in item.split(","):
            key, _, value = part.partition("=")
            name, _, field = key.strip().partition(".")
            if name not in BENCH_MODELS or not field or not value:
                raise SystemExit(f"--size {part}: expected MODEL.KEY=INT, MODEL one of "
                                 f"{', '.join(BENCH_MODELS)}")
            out.setdefault(name, {})[field] = int(value)
    return out


def model_spec(name: str, small: bool, batch: int | None = None,
               sizes: dict[str, int] | None = None):
    """The corpus' WholeModel for a bench name, at full or CPU sizes, with a batch or sizes
    overridden (rebuilt by its family's builder in corpus/whole_models.py)."""
    small_name, full_name = BENCH_MODELS[name]
    spec = WHOLE.MODELS[small_name] if small else WHOLE.FULL_MODELS[full_name]
    if sizes:
        unknown = set(sizes) - set(spec.sizes)
        if unknown:
            raise ValueError(f"{name}: no size {', '.join(sorted(unknown))} (its sizes: "
                             f"{', '.join(spec.sizes)})")
    if sizes or (batch and batch != spec.batch):
        spec = WHOLE.FAMILIES[spec.family](dict(spec.sizes, **(sizes or {})), name=spec.name,
                                           batch=batch or spec.batch)
    return spec


def _on_device(inputs: Sequence[Any], device: torch.device) -> tuple:
    """Inputs on the device, floating ones in the benchmark's dtype (token ids stay integers)."""
    return tuple(x.to(device=device, dtype=DTYPE if x.is_floating_point() else x.dtype)
                 if isinstance(x, torch.Tensor) else x for x in inputs)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------
# One model


def _stage(case: dict, name: str, fn: Callable[[], Any], save: Callable[[], None]) -> Any:
    """fn() with its seconds in case["seconds"][name]; what it raises is recorded in
    case["errors"][name] (traceback to the log) and FAILED returned; the file saved after."""
    clock = time.perf_counter()
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 - recorded, the rest runs
        traceback.print_exc()
        case["errors"][name] = _first_line(error)[:600]
        if isinstance(error, torch.OutOfMemoryError):
            gc.collect()
            torch.cuda.empty_cache()
        return FAILED
    finally:
        case["seconds"][name] = round(time.perf_counter() - clock, 3)
        save()


def _compiled(model: torch.nn.Module, example: tuple, device: torch.device,
              mode: str | None) -> Callable:
    """torch.compile of a copy of the model (so no variant's guards or CUDA graphs see
    another's), compiled by its first call."""
    compiled = torch.compile(copy.deepcopy(model), mode=mode) if mode else \
        torch.compile(copy.deepcopy(model))
    with quiet_torch(), torch.no_grad():
        compiled(*example)
    _synchronize(device)
    return compiled


def _errors_against(spec, fn: Callable, fresh: tuple, reference: dict) -> dict[str, float]:
    """Each named output's relative error against the float64 reference."""
    with torch.no_grad():
        got = spec.outputs(fn(*fresh))
    return {key: relative_error(got[key], ref) for key, ref in reference.items()}


def measure_model(name: str, args, device: torch.device, started: float,
                  save_partial: Callable[[dict], None]) -> dict:
    """One model measured in full (module docstring); never raises but KeyboardInterrupt."""
    case: dict[str, Any] = {"name": name, "status": "ok", "reason": "", "dtype": "bfloat16",
                            "precision": PRECISION, "seconds": {}, "errors": {}}
    save = lambda: save_partial(case)  # noqa: E731

    def log(message: str) -> None:
        _log(f"{name}: {message}", started)

    spec = model_spec(name, args.small, args.batch.get(name, args.batch.get("*")),
                      args.size.get(name))
    case.update(model=spec.name, what=spec.what, batch=spec.batch, sizes=spec.sizes)
    log(f"build {spec.what}")

    def build():
        model = spec.build().to(device=device, dtype=DTYPE).eval()
        return model, _on_device(spec.inputs(spec.batch, EXAMPLE_SEED), device)
    built = _stage(case, "build", build, save)
    if built is FAILED:
        case.update(status="failed", reason=f"build: {case['errors']['build']}")
        return case
    model, example = built
    case["inputs"] = [list(x.shape) if isinstance(x, torch.Tensor) else repr(x) for x in example]
    case["parameters"] = sum(p.numel() for p in model.parameters())

    # torch.compile (default mode) first: the baseline most users pick, compiled before FACT's
    # long optimize so that a budget spent there still leaves it measured (max-autotune, the
    # longest compile, comes last).
    early = {"torch_compile": _compile_baseline(case, "torch_compile", model, example, device, args,
                                                started, save, log)}

    # FACT
    work_dir = Path(args.work_dir) / name
    log(f"fact.optimize (precision {PRECISION}, tune {args.tune}, remainder {args.remainder})")

    def optimize():
        import fact
        with quiet_torch(), torch.no_grad():
            return fact.optimize(model, example, PRECISION, tune=args.tune,
                                 remainder=args.remainder, work_dir=work_dir)
    composed = _stage(case, "optimize", optimize, save)
    case["optimize_s"] = case["seconds"]["optimize"]
    if composed is FAILED:
        _fail(case, f"optimize: {case['errors']['optimize']}")
        composed = None
    else:
        def read_report():
            report = composed.fact_report
            graph = load_json(work_dir / "graph.json")
            counted = None if graph else counted_gemm_flops(model, example)[1]
            case["coverage"] = coverage_row(load_json(work_dir / "plan.json"), graph, report,
                                            counted)
            case.update(runs=report.runs, remainder=report.remainder, speed_guard=report.speed,
                        cuda_graphs=report.cuda_graphs,
                        optimize_stages_s={k: round(v, 3) for k, v in report.stage_seconds.items()},
                        notes=[note[:400] for note in report.notes],
                        kernel_ratios=kernel_ratios(report))
            case["config"] = "; ".join(
                f"{call.summary}: {call.config or call.kernel or c.implementation}"
                for c in report.composed for call in c.calls)
            cov, ratios = case["coverage"], case["kernel_ratios"]["all_summary"]
            log(f"optimized in {case['optimize_s']:.1f} s: composed {cov['composed']} of "
                f"{cov['matches']} matches, GEMM-FLOP share {_share(cov['share'])}; kernel "
                f"ratios (PyTorch/FACT) {_ratio_text(ratios)}; runs: {report.runs}")
        _stage(case, "report", read_report, save)

    # Two rounds, so that a run stopped during the long max-autotune compile still has FACT
    # against eager and torch.compile: (1) torch.compile (compiled above), then every variant so far
    # verified and timed interleaved; (2) max-autotune, verified, then all timed again together.
    variants: dict[str, Callable] = {"torch_eager": model}
    if composed is not None:
        variants["fact"] = composed
    state = {"compile_s": {}, "rel_errs": {}, "timing": {}}
    fresh = _on_device(spec.inputs(spec.batch, FRESH_SEED), device)
    reference: Any = None
    for round_index, round_variants in enumerate((("torch_compile",), ("torch_compile_max_autotune",))):
        for variant in round_variants:
            compiled = (early.pop(variant) if variant in early else
                        _compile_baseline(case, variant, model, example, device, args, started,
                                          save, log))
            if compiled is not None:
                variants[variant] = compiled
                state["compile_s"][variant] = case["seconds"][variant]
        if not any(v in variants for v in round_variants) and state["timing"]:
            _results(case, state)   # nothing new to time: the skip or failure recorded
            continue
        # Correctness: each new variant against the original in float64, on fresh inputs
        if reference is None:
            reference = _stage(case, "float64_reference", lambda: {
                k: v.detach() for k, v in spec.outputs(float64_output(model, fresh)).items()}, save)
            if reference is not FAILED:
                for key, ref in reference.items():
                    if not torch.isfinite(ref).all() or ref.double().std().item() == 0.0:
                        case.setdefault("notes", []).append(
                            f"the float64 reference's {key} is constant or not finite: the "
                            f"errors against it prove nothing")
        if reference is not FAILED:
            for variant, fn in list(variants.items()):
                if variant in state["rel_errs"]:
                    continue
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    errors = _stage(case, f"verify_{variant}",
                                    lambda fn=fn: _errors_against(spec, fn, fresh, reference), save)
                if errors is FAILED:
                    variants.pop(variant)
                    if variant == "fact":
                        _fail(case, f"fact on fresh inputs: {case['errors'][f'verify_{variant}']}")
                    continue
                state["rel_errs"][variant] = errors
                if variant == "fact":
                    case["fell_back"] = any("outside the plan" in str(w.message) for w in caught)
        # Timing: all variants interleaved, the L2 flushed before each run
        log(f"time {', '.join(variants)} ({args.warmup} warm-up + {args.iters} runs each)")
        state["timing"] = _stage(case, "timing" if round_index == 0 else "timing_again",
                                 lambda: _time_all(case, variants, example, device, args), save)
        if state["timing"] is FAILED:
            state["timing"] = {}
        _results(case, state)
        save()
    del reference, fresh
    if args.profile and device.type == "cuda":
        # Where each variant's time goes: its kernels under torch.profiler, by who wrote them
        profiled = {v: fn for v, fn in variants.items() if v in ("fact", "torch_compile",
                                                                 "torch_compile_max_autotune")}
        if composed is not None and composed._fallback is not None:
            # The never-slower check kept the original: the composed forward it rejected too,
            # to see where it loses
            profiled["fact_composed"] = lambda *inputs: composed._run_composed(inputs)
        case["profile"] = {}
        for variant, fn in profiled.items():
            profile = _stage(case, f"profile_{variant}",
                             lambda fn=fn: kernel_profile(lambda: fn(*example), device, top=30), save)
            if profile is not FAILED:
                case["profile"][variant] = profile
                log(f"profile {variant}: kernels {profile['total_ms']:.3f} ms per call: " + ", ".join(
                    f"{k} {v:.3f}" for k, v in profile["by_source"].items()))
        save()
    best = case.get("best_baseline", {})
    log(f"{case['status']}: fact {_ms(case['fact_ms'])}, " + ", ".join(
        f"{v} {_ms(b['ms'])}" for v, b in case["baselines"].items()) +
        f"; vs best ({best.get('name', '-')}) {_x(best.get('speedup'))}; rel_err fact "
        f"{_e(case['rel_err'])}, eager {_e(case['baselines']['torch_eager']['rel_err'])}")
    variants.clear()
    del composed, model, example
    return case


def _fail(case: dict, reason: str) -> None:
    if case["status"] != "failed":
        case.update(status="failed", reason=reason)


def _compile_baseline(case: dict, variant: str, model, example, device, args, started: float,
                      save, log) -> Callable | None:
    """A torch.compile baseline compiled (None when skipped or failed: the reason recorded);
    skipped when asked, or when fewer than --compile-reserve seconds of the budget are left."""
    mode = {"torch_compile": None, "torch_compile_max_autotune": "max-autotune"}[variant]
    if not args.compile or (mode and not args.max_autotune):
        case["errors"][variant] = "skipped (--no-compile / --no-max-autotune)"
        return None
    left = args.time_budget - (time.time() - started)
    if left < args.compile_reserve:
        case["errors"][variant] = (f"skipped: {max(left, 0):.0f} s of the time budget left, less "
                                   f"than --compile-reserve {args.compile_reserve:.0f} s")
        log(f"{variant}: {case['errors'][variant]}")
        return None
    log(f"{variant}: compile")
    compiled = _stage(case, variant, lambda: _compiled(model, example, device, mode), save)
    if compiled is FAILED:
        return None
    log(f"{variant}: compiled in {case['seconds'][variant]:.1f} s")
    return compiled


def _time_all(case: dict, variants: dict[str, Callable], example: tuple, device: torch.device,
              args) -> dict[str, dict]:
    """Each variant's TimingStats (as JSON): on CUDA interleaved (time_cuda_interleaved, the L2
    flushed before each run), one by one where that fails; on the CPU time_cpu."""
    timing: dict[str, dict] = {}
    timed = {v: (lambda fn=fn: fn(*example)) for v, fn in variants.items()}
    flusher = L2Flusher(args.flush_mb, device) if device.type == "cuda" else None
    with quiet_torch(), torch.no_grad():
        if flusher is not None:
            try:
                timing.update({v: stats.to_json() for v, stats in
                               time_cuda_interleaved(timed, args.warmup, args.iters, flusher).items()})
            except Exception as error:  # noqa: BLE001 - one variant fails: one by one
                case.setdefault("notes", []).append(
                    f"interleaved timing failed ({_first_line(error)}): timed one by one")
        for v, fn in timed.items():
            if v in timing:
                continue
            try:
                timing[v] = time_device(fn, device, args.warmup, args.iters, flusher).to_json()
            except Exception as error:  # noqa: BLE001 - recorded with the variant
                case["errors"][f"time_{v}"] = _first_line(error)
    return timing


def _results(case: dict, state: dict) -> None:
    """The case's results from the latest timing round and every verification so far:
    fact_ms, rel_err(s), baselines, speedups, the best baseline, the bounds, the status."""
    timing, rel_errs = state["timing"], state["rel_errs"]
    fact_ms = timing.get("fact", {}).get("median_ms")
    case.update(fact_ms=fact_ms, rel_errs=rel_errs, timing=timing,
                rel_err=max(rel_errs["fact"].values()) if rel_errs.get("fact") else None)
    case["baselines"] = {}
    for variant in BASELINES:
        errors = rel_errs.get(variant)
        entry: dict[str, Any] = {"ms": timing.get(variant, {}).get("median_ms"),
                                 "rel_err": max(errors.values()) if errors else None}
        if variant in state["compile_s"]:
            entry["compile_s"] = state["compile_s"][variant]
        for stage in (variant, f"verify_{variant}", f"time_{variant}"):
            if stage in case["errors"]:
                entry["error"] = case["errors"][stage]
                break
        case["baselines"][variant] = entry
    case["speedup"] = {v: b["ms"] / fact_ms for v, b in case["baselines"].items()
                       if b.get("ms") and fact_ms}
    timed = {v: b["ms"] for v, b in case["baselines"].items() if b.get("ms")}
    case.pop("best_baseline", None)
    if timed and fact_ms:
        best = min(timed, key=timed.get)
        case["best_baseline"] = {"name": best, "ms": timed[best], "speedup": timed[best] / fact_ms}
    # The bound per output: 2e-2 in native, or 1.5x PyTorch's own (eager) error where larger
    eager = rel_errs.get("torch_eager", {})
    case["bounds"] = {key: output_bound(PRECISION, eager.get(key)) for key in rel_errs.get("fact", {})}
    if case["status"] == "failed":
        return
    wrong = [f"{key} rel_err {err:.3g} > bound {case['bounds'][key]:.2g} (eager {eager.get(key)})"
             for key, err in rel_errs.get("fact", {}).items() if not err <= case["bounds"][key]]
    if wrong:
        case.update(status="wrong", reason="; ".join(wrong))
    elif not rel_errs.get("fact"):
        case.update(status="unverified", reason=case["errors"].get("float64_reference")
                    or "no float64 check of FACT's output")
    elif fact_ms is None:
        case.update(status="not timed", reason=case["errors"].get("time_fact")
                    or case["errors"].get("timing") or "fact was not timed")
    else:
        case.update(status="ok", reason="")


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(BENCH_MODELS),
                        help=f"comma-separated, of {', '.join(BENCH_MODELS)}")
    parser.add_argument("--batch", default="",
                        help="batch size for every model (8) or per model (gpt2=8,vit=32)")
    parser.add_argument("--size", action="append", default=[],
                        help="MODEL.KEY=INT, a size of corpus/whole_models.py's sizes dict "
                             "(gpt2.n_layer=6, llama.seq=1024, vit.image_size=384); repeatable")
    parser.add_argument("--small", action="store_true",
                        help="the CPU test sizes (corpus/whole_models.py MODELS)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tune", type=int, default=2)
    parser.add_argument("--remainder", default="inductor", choices=("inductor", "eager"),
                        help="fact.optimize's remainder (eager: quick CPU smoke runs)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="the torch.compile baselines (--no-compile skips both)")
    parser.add_argument("--max-autotune", action=argparse.BooleanOptionalAction, default=True,
                        help="the torch.compile(mode='max-autotune') baseline")
    parser.add_argument("--compile-reserve", type=float, default=150.0,
                        help="seconds: a torch.compile baseline is skipped when fewer are left in "
                             "the time budget (a whole model's max-autotune compile takes minutes)")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="profile FACT's and the torch.compile baselines' kernels per call "
                             "(torch.profiler, CUDA only; fact.kernel_profile)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--flush-mb", type=int, default=256)
    parser.add_argument("--time-budget", type=float, default=float("inf"),
                        help="seconds; models (and max-autotune compiles) that would start "
                             "after it are skipped")
    parser.add_argument("--tag", default="")
    parser.add_argument("--out-dir", default=str(REPO_ROOT / "bench" / "results"))
    parser.add_argument("--work-dir", default=str(REPO_ROOT / "out" / "models"))
    parser.add_argument("--render", metavar="RESULTS_JSON",
                        help="only write the .md table of a results file beside it")
    parser.add_argument("--merge", nargs="+", metavar="RESULTS_JSON",
                        help="only merge these results files (same device) into "
                             "<out-dir>/models-<device>-<their date>[-<tag>].json and its table")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in BENCH_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(BENCH_MODELS)}")
    args.batch = _int_map(args.batch, "--batch")
    args.size = _size_overrides(args.size)
    return args


def results_path(out_dir: Path, device_name: str, tag: str) -> Path:
    return Path(out_dir) / (f"{SUITE}-{device_slug(device_name)}-{date.today().isoformat()}"
                            f"{'-' + tag if tag else ''}.json")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        path = Path(args.render)
        path.with_suffix(".md").write_text(render_markdown(json.loads(path.read_text())))
        print(f"wrote {path.with_suffix('.md')}")
        return 0
    if args.merge:
        document = merge_results([Path(p) for p in args.merge])
        out = (Path(args.out_dir) / f"{SUITE}-{device_slug(document['device'])}-{document['date']}"
               f"{'-' + args.tag if args.tag else ''}.json")
        out.write_text(json.dumps(document, indent=1, default=str))
        out.with_suffix(".md").write_text(render_markdown(document))
        print(f"wrote {out} and {out.with_suffix('.md').name}")
        return 0
    started = time.time()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (--device cpu --small for a smoke run)")
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = results_path(Path(args.out_dir), device_name, args.tag)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "render"}
    settings.update(precision=PRECISION, dtype="bfloat16",
                    time_budget=None if math.isinf(args.time_budget) else args.time_budget)
    doc: dict[str, Any] = {"suite": SUITE, "schema": SCHEMA, "date": date.today().isoformat(),
                           "device": device_name, "versions": collect_versions(device),
                           "settings": settings, "cases": [], "summary": {}}

    def write(partial: dict | None = None) -> None:
        cases = doc["cases"] + ([{**partial, "partial": True}] if partial else [])
        document = {**doc, "cases": cases, "summary": summarize(cases),
                    "seconds": round(time.time() - started, 1)}
        out.write_text(json.dumps(document, indent=1, default=str))
        out.with_suffix(".md").write_text(render_markdown(document))

    def interrupted(signum, frame):  # noqa: ARG001 - SIGTERM like SIGINT: write, then stop
        raise KeyboardInterrupt(f"signal {signum}")
    previous = signal.signal(signal.SIGTERM, interrupted)
    _log(f"models {', '.join(args.models)} on {device_name} ({'CPU test' if args.small else 'full'}"
         f" sizes), results {out}", started)
    try:
        for name in args.models:
            if time.time() - started > args.time_budget:
                doc["cases"].append({"name": name, "status": "skipped",
                                     "reason": f"would start after the time budget "
                                               f"({args.time_budget:.0f} s)"})
                _log(f"{name}: skipped (time budget)", started)
                write()
                continue
            try:
                case = measure_model(name, args, device, started, write)
            except KeyboardInterrupt:
                doc["cases"].append({"name": name, "status": "interrupted",
                                     "reason": "SIGINT/SIGTERM while measuring"})
                raise
            except Exception as error:  # noqa: BLE001 - recorded, next model
                traceback.print_exc()
                case = {"name": name, "status": "failed",
                        "reason": _first_line(error)}
            doc["cases"].append(case)
            write()
            gc.collect()
            torch._dynamo.reset()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    except KeyboardInterrupt:
        _log("interrupted: writing what was measured", started)
    finally:
        signal.signal(signal.SIGTERM, previous)
        write()
    summary = summarize(doc["cases"])
    _log(f"done: {summary['by_status']}; geomean vs best baseline "
         f"{_x(summary['geomean_vs_best_baseline'])}; wrote {out} and {out.with_suffix('.md').name}",
         started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
