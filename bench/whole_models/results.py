"""The whole-model benchmark's results (bench/whole_models/run_whole_models.py): the per-
replacement kernel ratios read from a FACT report, the summary over models, the merge of
several runs' files into one, and the readable table. Reads and writes plain dicts (the results
file's shape, bench/whole_models/README.md); imports nothing from torch."""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Sequence

from fact.conformance.coverage import _share

SUITE = "models"
SCHEMA = "fact.bench.models/1"
BASELINES = ("torch_eager", "torch_compile", "torch_compile_max_autotune")
SLOWER = 0.98   # a model slower than its best baseline by more than 2% is listed in the summary
# fact.compose.guards' reason for a replacement left to PyTorch for its speed
_SPEED_REASON = re.compile(r"([0-9.eE+-]+) ms vs ([0-9.eE+-]+) ms")

# ---------------------------------------------------------------------------------------------
# Kernel ratios


def distribution(values: Sequence[float]) -> dict:
    """count, min, median, max, geomean, and how many are below 1.0 (PyTorch faster there)."""
    values = sorted(v for v in values if v is not None and math.isfinite(v) and v > 0)
    if not values:
        return {"count": 0}
    return {"count": len(values), "min": values[0], "median": statistics.median(values),
            "max": values[-1], "geomean": geomean(values),
            "below_1": sum(1 for v in values if v < 1.0)}


def geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def kernel_ratios(report) -> dict:
    """Per replacement, PyTorch's own run of the subgraph over FACT's calls (fact.
    replacement_speed, timed by the replacement guard while optimizing; > 1: FACT's kernels
    faster): the composed ones (their calls_ms / subgraph_ms) and the ones the guard left to
    PyTorch for their speed (stage "speed": the times its reason gives), each distribution, and
    the composed ones by rule."""
    composed = []
    for c in report.composed:
        ratio = (c.subgraph_ms / c.calls_ms if c.calls_ms and c.subgraph_ms is not None else None)
        composed.append({"label": c.label, "rule": c.rule,
                         "kinds": [call.kind for call in c.calls],
                         "calls_ms": c.calls_ms, "subgraph_ms": c.subgraph_ms, "ratio": ratio})
    declined = []
    for item in report.left_to_pytorch:
        if item.stage != "speed":
            continue
        found = _SPEED_REASON.search(item.reason or "")
        calls_ms = float(found.group(1)) if found else None
        subgraph_ms = item.subgraph_ms if item.subgraph_ms is not None else (
            float(found.group(2)) if found else None)
        declined.append({"what": item.what, "reason": item.reason, "calls_ms": calls_ms,
                         "subgraph_ms": subgraph_ms,
                         "ratio": subgraph_ms / calls_ms if calls_ms and subgraph_ms else None})
    by_rule: dict[str, list[float]] = {}
    for entry in composed:
        if entry["ratio"] is not None:
            by_rule.setdefault(entry["rule"], []).append(entry["ratio"])
    return {"composed": composed, "declined_for_speed": declined,
            "composed_summary": distribution([e["ratio"] for e in composed]),
            "declined_summary": distribution([e["ratio"] for e in declined]),
            "all_summary": distribution([e["ratio"] for e in composed + declined]),
            "by_rule": {rule: distribution(values) for rule, values in sorted(by_rule.items())}}


# ---------------------------------------------------------------------------------------------
# Summary and table


def runs_composed(case: dict) -> bool:
    """Whether the module fact.optimize returned runs the composed module (its report's `runs`
    starts "composed"), not the original eagerly or torch.compile of it (the never-slower check's
    choice when the composed module was slower)."""
    return str(case.get("runs", "")).startswith("composed")


def merge_results(paths: Sequence[Path]) -> dict:
    """One results document from several runs' files (e.g. one model per GPU or per device
    call): their cases in order, the summary recomputed, each source's versions and settings
    kept under `sources`. A case whose torch.compile baseline was not timed by the bench (skipped
    for time) takes the one FACT's never-slower check timed in the same process
    (`speed_guard.original_ms`, when that was torch.compile of the original), marked with its
    source; its speedup is computed against the bench's FACT time."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    devices = {d.get("device") for d in docs}
    if len(devices) != 1:
        raise SystemExit(f"--merge: results of different devices ({', '.join(map(str, devices))})")
    cases = []
    for doc in docs:
        for case in doc.get("cases", []):
            case = json.loads(json.dumps(case))
            guard = case.get("speed_guard") or {}
            compiled = case.get("baselines", {}).get("torch_compile", {})
            if (compiled and compiled.get("ms") is None and guard.get("original_ms")
                    and guard.get("original") == "torch.compile of the original"):
                compiled.update(ms=guard["original_ms"], source=(
                    "timed by fact.optimize's never-slower check in the same process (the bench's "
                    "own torch.compile baseline was skipped: " + str(compiled.get("error")) + ")"))
                compiled.pop("error", None)
                fact_ms = case.get("fact_ms")
                if fact_ms:
                    case["speedup"]["torch_compile"] = compiled["ms"] / fact_ms
                    timed = {v: b["ms"] for v, b in case["baselines"].items() if b.get("ms")}
                    best = min(timed, key=timed.get)
                    case["best_baseline"] = {"name": best, "ms": timed[best],
                                             "speedup": timed[best] / fact_ms}
            cases.append(case)
    first = docs[0]
    return {"suite": SUITE, "schema": SCHEMA, "date": first.get("date"), "device": first.get("device"),
            "versions": first.get("versions"), "settings": first.get("settings"),
            "sources": [{"file": Path(p).name, "versions": d.get("versions"),
                         "settings": d.get("settings"), "models": [c.get("name") for c in d.get("cases", [])]}
                        for p, d in zip(paths, docs)],
            "cases": cases, "summary": summarize(cases)}


def summarize(cases: list[dict]) -> dict:
    measured = [c for c in cases if c.get("best_baseline")]
    by_status: dict[str, int] = {}
    for c in cases:
        by_status[c["status"]] = by_status.get(c["status"], 0) + 1
    vs_best = {c["name"]: c["best_baseline"]["speedup"] for c in measured}
    worst = min(vs_best, key=vs_best.get) if vs_best else None
    covered = [c["coverage"] for c in cases if c.get("coverage")]
    total = sum(cov["gemm_flops"] for cov in covered)
    ratios = [e["ratio"] for c in cases for key in ("composed", "declined_for_speed")
              for e in c.get("kernel_ratios", {}).get(key, [])]
    return {
        "models": len(cases),
        "by_status": by_status,
        "geomean_vs_best_baseline": geomean(list(vs_best.values())),
        "min_vs_best_baseline": {"model": worst, "speedup": vs_best[worst]} if worst else None,
        "vs_best_baseline": vs_best,
        "geomean_vs": {v: geomean([c["speedup"][v] for c in measured if v in c["speedup"]])
                       for v in BASELINES},
        "slower_than_best_baseline": [n for n, s in vs_best.items() if s < SLOWER],
        "gemm_flop_share": {c["name"]: c["coverage"]["share"] for c in cases if c.get("coverage")},
        "gemm_flop_share_all": (sum(cov["fact_flops"] for cov in covered) / total) if total else None,
        # What runs: a model whose never-slower check chose the original runs no FACT kernel
        "gemm_flop_share_running": {c["name"]: (c["coverage"]["share"] if runs_composed(c) else 0.0)
                                    for c in cases if c.get("coverage")},
        "kernel_ratios": distribution(ratios),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ratio_text(summary: dict) -> str:
    if not summary.get("count"):
        return "none timed"
    return (f"{summary['count']}: min {summary['min']:.3g}, median {summary['median']:.3g}, "
            f"max {summary['max']:.3g}, {summary['below_1']} below 1")


def _timer(doc: dict) -> str:
    for case in doc.get("cases", []):
        for stats in (case.get("timing") or {}).values():
            if stats.get("timer"):
                return stats["timer"]
    return "not timed"


def render_markdown(doc: dict) -> str:
    """The readable table of a results document."""
    settings = doc.get("settings", {})
    lines = [f"# FACT on whole models, {doc['device']}, {doc['date']}", "",
             f"bf16 (precision native), tune {settings.get('tune')}, remainder "
             f"{settings.get('remainder')}; versions: " + ", ".join(
                 f"{k} {v}" for k, v in doc.get("versions", {}).items()) + ".",
             f"Times: median ms ({_timer(doc)}). Speedup: baseline ms / FACT ms; vs best: "
             "against the fastest baseline. Errors: the largest over the outputs of "
             "‖out − ref‖/‖ref‖ against the original in float64 on fresh inputs.", "",
             "| model | inputs | status | FACT | eager | torch.compile | max-autotune | "
             "vs best | rel_err FACT / eager | GEMM-FLOP share (running) | composed / matches | "
             "optimize s | compile s / max-autotune s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc.get("cases", []):
        b = c.get("baselines", {})
        cov = c.get("coverage", {})
        best = c.get("best_baseline") or {}
        vs_best = f"{_x(best.get('speedup'))} ({best['name']})" if best else "-"
        shapes = " ".join("x".join(map(str, s)) for s in c.get("inputs", []) if isinstance(s, list))
        lines.append(
            f"| {c['name']} | {shapes} "
            f"| {c['status']} | {_ms(c.get('fact_ms'))} "
            + " ".join(f"| {_ms(b.get(v, {}).get('ms'))}" for v in BASELINES)
            + f" | {vs_best} | {_e(c.get('rel_err'))} / {_e(b.get('torch_eager', {}).get('rel_err'))} "
            f"| {_share(cov.get('share'))} ({_share(cov.get('share') if runs_composed(c) else 0.0)}) "
            f"| {cov.get('composed', '-')} / {cov.get('matches', '-')} "
            f"| {_seconds(c.get('optimize_s'))} | "
            + " / ".join(_seconds(b.get(v, {}).get("compile_s")) for v in BASELINES[1:]) + " |")
    summary = doc.get("summary", {})
    if summary:
        worst = summary.get("min_vs_best_baseline") or {}
        lines += ["", f"Geomean vs the best baseline {_x(summary.get('geomean_vs_best_baseline'))}"
                  f", min {_x(worst.get('speedup'))} ({worst.get('model', '-')}); geomean vs "
                  + ", ".join(f"{v} {_x(g)}" for v, g in summary.get("geomean_vs", {}).items())
                  + f"; GEMM-FLOP share over all models {_share(summary.get('gemm_flop_share_all'))}"
                  f" (composed; running, where the never-slower check kept the composed module: "
                  + ", ".join(f"{n} {_share(v)}" for n, v in summary.get("gemm_flop_share_running", {}).items())
                  + ")"
                  f"; per-replacement kernel ratios (PyTorch's subgraph / FACT's calls) "
                  f"{_ratio_text(summary.get('kernel_ratios', {}))}."]
    lines += ["", "## Per model", ""]
    for c in doc.get("cases", []):
        lines.append(f"### {c['name']}: {c.get('what', '')}")
        if c.get("reason"):
            lines.append(f"- {c['status']}: {c['reason']}")
        if c.get("runs"):
            lines.append(f"- runs: {c['runs']}")
        for v, b in c.get("baselines", {}).items():
            if b.get("source"):
                lines.append(f"- {v}: {b['source']}")
        ratios = c.get("kernel_ratios", {})
        if ratios:
            lines.append(f"- kernel ratios, composed {_ratio_text(ratios.get('composed_summary', {}))}; "
                         f"left to PyTorch for speed {_ratio_text(ratios.get('declined_summary', {}))}")
            for rule, d in ratios.get("by_rule", {}).items():
                lines.append(f"  - {rule}: {_ratio_text(d)}")
        for reason, count in (c.get("coverage", {}).get("declined_by_reason") or {}).items():
            lines.append(f"- left to PyTorch ({count}x): {reason}")
        for stage, error in c.get("errors", {}).items():
            if error not in c.get("reason", ""):
                lines.append(f"- {stage}: {error}")
        if c.get("optimize_stages_s"):
            lines.append("- optimize stages: " + ", ".join(
                f"{k} {v:.1f} s" for k, v in c["optimize_stages_s"].items()))
        lines.append("")
    return "\n".join(lines) + "\n"
