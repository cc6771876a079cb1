"""One case of the GPU benchmark (`fact bench conformance`): which (file, dtype) pairs a run
measures and in what order (`gpu_cases`, QUICK first), and one case measured in full
(`run_gpu_case`: fact.optimize tuned, torch.compile and eager, verified against float64,
timed). Also the run's progress lines (`_log`) and the names its results files take."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from fact.conformance.corpus import (_first_line, _single_tensor, build_case, case_record,
                                     file_dtypes, float64_output, load_json,
                                     output_bound, quiet_torch, relative_error)
from fact.conformance.coverage import _share, coverage_row


SUITE = "conformance"
# What one 10-minute device call holds on an H100 (about 8 minutes of benchmark after the
# engine build): the first cases of every run, in this order; a run that has time left goes on
# with the rest of the corpus (corpus order) until its --time-budget is spent.
QUICK = ("mlp_swiglu_llama:bfloat16", "gemm_linear_bias:float32", "hf_llama_decoder:bfloat16",
         "epilogue_scale_hardtanh_gelu:bfloat16", "mlp_sequential_relu:float32",
         "hf_gpt2_block:bfloat16", "hf_bert_layer:bfloat16", "attention_sdpa_is_causal:bfloat16")
# Files whose float32 run (precision strict) is measured too: the GEMM-dominated categories.
STRICT_CATEGORIES = ("gemm", "epilogue", "mlp")
WORKER_LOST_EXIT = 3   # a worker that finds the CUDA context unusable after a failure exits so


def gpu_cases(files: Sequence[Path], models: Sequence[str] | None = None, quick: bool = False,
              dtypes: Sequence[str] | None = None) -> list[tuple[Path, str]]:
    """(file, dtype) pairs of the GPU run: every file in bfloat16 (native), the gemm / epilogue
    / mlp files in float32 (strict) too; QUICK first, then the rest in corpus order. `models`
    ("stem" or "stem:dtype") narrows them; `quick` keeps QUICK only."""
    cases = []
    for path in files:
        declared = file_dtypes(path)
        if "bfloat16" in declared:
            cases.append((path, "bfloat16"))
        if "float32" in declared and path.stem.split("_", 1)[0] in STRICT_CATEGORIES:
            cases.append((path, "float32"))
    if dtypes:
        cases = [c for c in cases if c[1] in dtypes]
    if models:
        wanted = {m.strip() for m in models if m.strip()}
        cases = [c for c in cases if c[0].stem in wanted or f"{c[0].stem}:{c[1]}" in wanted]
    order = {name: i for i, name in enumerate(QUICK)}
    if quick:
        cases = [c for c in cases if f"{c[0].stem}:{c[1]}" in order]
    return sorted(cases, key=lambda c: order.get(f"{c[0].stem}:{c[1]}", len(order)))


def device_slug(device_name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3" (as fact::realize::device_slug)."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown-device"


def _log(message: str, started: float) -> None:
    print(f"[{time.time() - started:7.1f}s] {message}", flush=True)


def run_gpu_case(path: Path, dtype_name: str, work_dir: Path, *, device: str = "cuda",
                 sizes: str = "full", tune: int = 2, warmup: int = 5, iters: int = 30,
                 flush_mb: int = 256, seed: int = 0, started: float | None = None) -> dict:
    """One (corpus file, dtype) at its full size (sizes="cpu": CPU_TEST_SIZES, for a smoke test):
    fact.optimize (tuned over `tune` configurations, Inductor remainder, never-slower guard on),
    torch.compile (default mode) and eager, each checked against the original run in float64 on
    the same device on fresh inputs, then timed (CUDA events after warm-up, L2 flushed before
    each run, median of `iters`). Raises when FACT itself fails (the caller records it); a
    baseline that fails is recorded in its entry."""
    from fact.compose import optimize
    from fact.measure import _fresh_like
    from fact.timing import L2Flusher, time_cuda_interleaved, time_device

    started = started or time.time()
    case = case_record(path.stem, dtype_name)
    precision = case["precision"]
    seconds: dict = {}
    case["seconds"] = seconds
    clock = time.perf_counter()
    module, model, inputs = build_case(path, dtype_name, device, sizes, seed)
    case["inputs"] = [list(x.shape) if isinstance(x, torch.Tensor) else repr(x) for x in inputs]
    case["sizes"] = {k: getattr(module, k) for k in getattr(module, "CPU_TEST_SIZES", {})}

    _log(f"{case['name']}: fact.optimize (precision {precision}, tune {tune})", started)
    with quiet_torch():
        composed = optimize(model, inputs, precision, work_dir=work_dir, tune=tune,
                            remainder="inductor")
    seconds["optimize"] = time.perf_counter() - clock
    report = composed.fact_report
    case["coverage"] = coverage_row(load_json(Path(work_dir) / "plan.json"),
                                    load_json(Path(work_dir) / "graph.json"), report)
    case["runs"] = report.runs
    case["remainder"] = report.remainder
    case["speed_guard"] = report.speed
    case["notes"] = [note[:400] for note in report.notes]  # e.g. "never-slower check not done: ..."
    case["config"] = "; ".join(f"{call.summary}: {call.config or call.kernel or c.implementation}"
                               for c in report.composed for call in c.calls)
    case["replacements"] = [{"label": c.label, "rule": c.rule, "rel_err": c.rel_err,
                             "tolerance": c.tolerance, "calls_ms": c.calls_ms,
                             "subgraph_ms": c.subgraph_ms} for c in report.composed]
    cov = case["coverage"]
    _log(f"{case['name']}: composed {cov['composed']} of {cov['matches']} matches, GEMM-FLOP "
         f"share {_share(cov['share'])}; runs: {report.runs}", started)

    clock = time.perf_counter()
    variants: dict[str, Callable] = {"torch_eager": model}
    errors: dict[str, str] = {}
    try:
        compiled = torch.compile(model, dynamic=False)  # as the never-slower guard compiles it
        with quiet_torch(), torch.no_grad():
            compiled(*inputs)
        variants["torch_compile"] = compiled
    except Exception as error:  # noqa: BLE001 - a baseline that fails is recorded
        errors["torch_compile"] = _first_line(error)
    seconds["torch_compile"] = time.perf_counter() - clock

    clock = time.perf_counter()
    fresh = _fresh_like(inputs, seed + 1000)
    reference = float64_output(model, fresh)
    rel_err: dict[str, float | None] = {}
    with quiet_torch(), torch.no_grad():
        for name, fn in [*variants.items(), ("fact", composed)]:
            try:
                rel_err[name] = relative_error(_single_tensor(fn(*fresh)), reference)
            except Exception as error:  # noqa: BLE001
                if name == "fact":
                    raise
                errors[name] = _first_line(error)
                rel_err[name] = None
    del reference, fresh
    seconds["verify"] = time.perf_counter() - clock

    clock = time.perf_counter()
    flusher = L2Flusher(flush_mb, torch.device(device)) if device.startswith("cuda") else None
    timing: dict[str, dict] = {}
    timed = {name: (lambda fn=fn, args=inputs: fn(*args)) for name, fn in [*variants.items(), ("fact", composed)]
             if name not in errors}
    with quiet_torch(), torch.no_grad():
        if flusher is not None:
            try:  # all variants in rounds, so clock drift falls on each alike (time_cuda_interleaved)
                timing = {name: stats.to_json() for name, stats in
                          time_cuda_interleaved(timed, warmup, iters, flusher).items()}
            except Exception:  # noqa: BLE001 - one variant fails to run: time them one by one
                timing = {}
        for name, fn in timed.items():
            if name in timing:
                continue
            try:
                timing[name] = time_device(fn, torch.device(device), warmup, iters, flusher).to_json()
            except Exception as error:  # noqa: BLE001
                if name == "fact":
                    raise
                errors[name] = _first_line(error)
    seconds["timing"] = time.perf_counter() - clock
    del flusher

    fact_ms = timing["fact"]["median_ms"]
    case["fact_ms"] = fact_ms
    case["rel_err"] = rel_err["fact"]
    case["baselines"] = {}
    for name in ("torch_eager", "torch_compile"):
        entry = {"ms": timing.get(name, {}).get("median_ms"), "rel_err": rel_err.get(name)}
        if name in errors:
            entry["error"] = errors[name]
        case["baselines"][name] = entry
    case["speedup"] = {name: b["ms"] / fact_ms for name, b in case["baselines"].items()
                       if b.get("ms") and fact_ms}
    case["timing"] = timing
    eager_err = rel_err.get("torch_eager")
    bound = output_bound(precision, eager_err)
    if not (case["rel_err"] is not None and case["rel_err"] <= bound):
        case["status"] = "wrong"
        case["reason"] = (f"rel_err vs float64 {case['rel_err']:.3g} > bound {bound:.1g} "
                          f"(PyTorch eager: {eager_err})")
    case["bound"] = bound
    _log(f"{case['name']}: fact {fact_ms:.4g} ms, eager "
         f"{case['baselines']['torch_eager']['ms'] or float('nan'):.4g} ms, torch.compile "
         f"{case['baselines']['torch_compile']['ms'] or float('nan'):.4g} ms; speedup vs compile "
         f"{case['speedup'].get('torch_compile', float('nan')):.3g}x; rel_err fact "
         f"{case['rel_err']:.2g}, eager {eager_err if eager_err is None else format(eager_err, '.2g')}",
         started)
    variants.clear()
    del composed, model, inputs
    return case
