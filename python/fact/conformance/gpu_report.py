"""What a GPU benchmark's results say: the summary of its cases (`summarize_gpu`: geometric-mean
speedups against torch.compile, the cases slower than it), the readable table written next to
the results file (`render_gpu_markdown`), the plot (`plot_gpu`) and the short table of
--summarize (`short_table`)."""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Iterable, Sequence

from fact.conformance.corpus import PRECISION_BY_DTYPE
from fact.conformance.coverage import _share
from fact.conformance.gpu_case import SUITE


def _geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarize_gpu(cases: Sequence[dict]) -> dict:
    """Geometric-mean speedups against torch.compile (the project's goals: float32 strict over the
    GEMM-dominated files >= 2.0x, bf16 transformer blocks >= 1.15x), slower-than-compile cases
    (beyond 2%), counts by status."""
    measured = [c for c in cases if c.get("status") in ("ok", "wrong") and c.get("speedup")]

    def compile_speedups(selected):
        return [c["speedup"].get("torch_compile") for c in selected]

    strict = [c for c in measured if c["precision"] == "strict"]
    bf16 = [c for c in measured if c["dtype"] == "bfloat16"]
    blocks = [c for c in bf16 if c["model"].startswith(("hf_", "misc_tiny_decoder"))]
    slower = [f"{c['name']}: {c['speedup']['torch_compile']:.3f}x" for c in measured
              if c["speedup"].get("torch_compile") is not None and c["speedup"]["torch_compile"] < 1 / 1.02]
    statuses: dict[str, int] = {}
    for c in cases:
        statuses[c.get("status", "?")] = statuses.get(c.get("status", "?"), 0) + 1
    return {
        "cases": len(cases), "by_status": statuses,
        "geomean_vs_torch_compile": {
            "strict_float32": _geomean(compile_speedups(strict)),
            "bf16_all": _geomean(compile_speedups(bf16)),
            "bf16_blocks": _geomean(compile_speedups(blocks)),
            "all": _geomean(compile_speedups(measured)),
        },
        "geomean_vs_torch_eager": _geomean(c["speedup"].get("torch_eager") for c in measured),
        "slower_than_torch_compile": slower,
        "goals": "no model slower than torch.compile beyond 2%; geomean strict float32 >= 2.0x "
                 "torch.compile; bf16 blocks >= 1.15x",
    }


def merge_results(docs: Sequence[dict], names: Sequence[str]) -> dict:
    """One results file from several of one device (runs that each measured part of the corpus,
    e.g. a re-measure of some cases): per case, the record of the last file that measured it
    (status ok or wrong), else the last record; a record taken from another file than the last
    one is marked resumed_from (that file's device and date), as --resume marks it. Raises
    ValueError for files of different devices or without cases."""
    if not docs:
        raise ValueError("nothing to merge")
    devices = {doc.get("device") for doc in docs}
    if len(devices) != 1:
        raise ValueError(f"results of different devices cannot be merged: {sorted(map(str, devices))}")
    chosen: dict[str, tuple[int, dict]] = {}
    order: list[str] = []
    for index, doc in enumerate(docs):
        if not isinstance(doc.get("cases"), list):
            raise ValueError(f"{names[index]}: not a conformance results file")
        for case in doc["cases"]:
            name = case.get("name")
            if name not in chosen:
                order.append(name)
            measured = case.get("status") in ("ok", "wrong")
            if name not in chosen or measured or chosen[name][1].get("status") not in ("ok", "wrong"):
                chosen[name] = (index, case)
    last = docs[-1]
    cases = []
    for name in order:
        index, case = chosen[name]
        if index != len(docs) - 1 and not case.get("resumed_from"):
            case = dict(case, resumed_from=f"{docs[index].get('device')} {docs[index].get('date')}")
        cases.append(case)
    settings = dict(last.get("settings", {}))
    settings["merged_from"] = list(names)
    return {"suite": last.get("suite"), "date": last.get("date"), "device": last.get("device"),
            "versions": last.get("versions", {}), "settings": settings, "cases": cases,
            "summary": summarize_gpu(cases)}


def render_gpu_markdown(doc: dict) -> str:
    """The readable table of a conformance results document."""
    s = doc.get("summary", {})
    v = doc.get("versions", {})
    settings = doc.get("settings", {})
    lines = [f"# FACT conformance benchmark on {doc.get('device', '?')} ({doc.get('date', '?')})", "",
             f"driver {v.get('driver', '?')}, CUDA {v.get('cuda', '?')}, torch {v.get('torch', '?')}, "
             f"CUTLASS {v.get('cutlass', '?')}, fact {v.get('fact', '?')}", "",
             f"Settings: {settings.get('note', '')}", ""]
    resumed = settings.get("resumed")
    if resumed:
        timers = sorted({"interleaved" if "interleaved" in str(c.get("timing", {}).get("fact", {}).get("timer"))
                         else "one after the other" for c in doc.get("cases", []) if c.get("resumed_from")})
        lines += [f"{resumed.get('cases', 0)} cases (marked `resumed_from` in the JSON) were measured "
                  f"in earlier calls and kept from `{resumed.get('from')}` ({resumed.get('device')}, "
                  f"{resumed.get('date')}), where eager / torch.compile / FACT were timed "
                  f"{' and '.join(timers) or '?'}; each case's `timing` names its timer.", ""]
    g = s.get("geomean_vs_torch_compile", {})

    def x(value):
        return "-" if value is None else f"{value:.2f}x"

    lines += ["## Summary", "",
              f"- cases: {s.get('cases', 0)} ({', '.join(f'{n} {k}' for k, n in s.get('by_status', {}).items())})",
              f"- geomean speedup vs torch.compile: float32 strict {x(g.get('strict_float32'))} "
              f"(goal 2.0x), bf16 blocks {x(g.get('bf16_blocks'))} (goal 1.15x), all bf16 "
              f"{x(g.get('bf16_all'))}, all {x(g.get('all'))}; vs eager {x(s.get('geomean_vs_torch_eager'))}",
              "- slower than torch.compile (beyond 2%): "
              + ("; ".join(s.get("slower_than_torch_compile", [])) or "none"), "",
              "## Cases", "",
              "| model | dtype | status | composed / matches | GEMM-FLOP share | FACT ms | eager ms | "
              "compile ms | vs eager | vs compile | rel_err FACT | rel_err eager | runs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ms(value):
        return "-" if value is None else f"{value:.3f}"

    def err(value):
        return "-" if value is None else f"{value:.1e}"

    for c in doc.get("cases", []):
        cov = c.get("coverage") or {}
        b = c.get("baselines", {})
        sp = c.get("speedup", {})
        runs = str(c.get("runs", "")).split(" (")[0].split(":")[0][:40]
        lines.append(
            f"| {c.get('model')} | {c.get('dtype')} | {c.get('status')} | "
            f"{cov.get('composed', '-')} / {cov.get('matches', '-')} | {_share(cov.get('share'))} | "
            f"{ms(c.get('fact_ms'))} | {ms(b.get('torch_eager', {}).get('ms'))} | "
            f"{ms(b.get('torch_compile', {}).get('ms'))} | {x(sp.get('torch_eager'))} | "
            f"{x(sp.get('torch_compile'))} | {err(c.get('rel_err'))} | "
            f"{err(b.get('torch_eager', {}).get('rel_err'))} | {runs} |")
    problems = [c for c in doc.get("cases", []) if c.get("status") != "ok"]
    if problems:
        lines += ["", "## Not measured or wrong", ""]
        lines += [f"- {c['name']}: {c.get('status')}: {c.get('reason', '')}" for c in problems]
    unguarded = [c for c in doc.get("cases", []) if c.get("status") == "ok" and c.get("speed_guard") is None
                 and str(c.get("runs", "")).startswith("composed")]
    if unguarded:  # the never-slower check did not run: FACT's time is the composed module's as is
        lines += ["", "## Composed without the never-slower check", ""]
        lines += [f"- {c['name']}: " + ("; ".join(n for n in c.get("notes", []) if "never-slower" in n)
                                        or "no timing recorded") for c in unguarded]
    declines: dict[str, int] = {}
    for c in doc.get("cases", []):
        for reason, n in ((c.get("coverage") or {}).get("declined_by_reason") or {}).items():
            declines[reason] = declines.get(reason, 0) + n
    if declines:
        lines += ["", "## Left to PyTorch, by reason", ""]
        lines += [f"- {n}x {r}" for r, n in sorted(declines.items(), key=lambda kv: -kv[1])]
    lines += ["", "FACT ms is the composed module as fact.optimize returns it: where the composed "
                  "graph was slower than torch.compile of the original it runs that instead "
                  "(`runs`); `speed_guard` in the JSON has both timings. Timer: "
                  + str(next((c["timing"]["fact"].get("timer") for c in doc.get("cases", [])
                              if c.get("timing", {}).get("fact")), "-")) + "."]
    return "\n".join(lines) + "\n"


def plot_gpu(doc: dict, png: Path) -> str | None:
    """Speedup against torch.compile (y, log scale) against the GEMM-FLOP share FACT covers
    (x), one point per case; None when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    points = [(c, (c.get("coverage") or {}).get("share"), c.get("speedup", {}).get("torch_compile"))
              for c in doc.get("cases", [])]
    points = [(c, x, y) for c, x, y in points if x is not None and y]
    if not points:
        return "no case with both a coverage and a speedup"
    fig, ax = plt.subplots(figsize=(9, 6))
    for dtype, marker, color in (("bfloat16", "o", "tab:blue"), ("float32", "s", "tab:orange")):
        chosen = [(c, x, y) for c, x, y in points if c["dtype"] == dtype]
        if chosen:
            ax.scatter([x * 100 for _, x, _ in chosen], [y for *_, y in chosen], marker=marker,
                       color=color, label=f"{dtype} ({PRECISION_BY_DTYPE[dtype]})")
        for c, x, y in chosen:
            ax.annotate(c["model"], (x * 100, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xlim(-5, 105)
    ax.set_yscale("log")
    ax.set_xlabel("share of the model's GEMM FLOPs in FACT kernels (%)")
    ax.set_ylabel("speedup vs torch.compile (x)")
    ax.set_title(f"FACT conformance: {doc.get('device', '?')}, {doc.get('date', '?')}")
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=130)
    plt.close(fig)
    return None


def short_table(doc: dict) -> str:
    """A few lines per results document: one per case, then the geometric means."""
    lines = [f"{doc.get('suite', SUITE)} on {doc.get('device', '?')} ({doc.get('date', '?')}), "
             f"fact {doc.get('versions', {}).get('fact', '?')}",
             f"{'model':<34} {'dtype':<8} {'status':<7} {'share':>5} {'FACT ms':>9} {'compile ms':>10} "
             f"{'vs compile':>10} {'vs eager':>8} {'rel_err':>8}  runs"]
    for c in doc.get("cases", []):
        cov = c.get("coverage") or {}
        compile_ms = (c.get("baselines", {}).get("torch_compile") or {}).get("ms")
        sp = c.get("speedup", {})

        def num(value, spec):
            return "-" if value is None else format(value, spec)

        lines.append(f"{c.get('model', '?'):<34} {c.get('dtype', '?'):<8} {c.get('status', '?'):<7} "
                     f"{_share(cov.get('share')):>5} {num(c.get('fact_ms'), '.3f'):>9} "
                     f"{num(compile_ms, '.3f'):>10} {num(sp.get('torch_compile'), '.2f'):>10} "
                     f"{num(sp.get('torch_eager'), '.2f'):>8} {num(c.get('rel_err'), '.1e'):>8}  "
                     f"{str(c.get('runs') or c.get('reason', ''))[:60]}")
    s = doc.get("summary", {})
    g = s.get("geomean_vs_torch_compile", {})

    def x(value):
        return "-" if value is None else f"{value:.2f}x"

    lines.append(f"geomean vs torch.compile: strict float32 {x(g.get('strict_float32'))} (goal 2.0x), "
                 f"bf16 blocks {x(g.get('bf16_blocks'))} (goal 1.15x), bf16 {x(g.get('bf16_all'))}, "
                 f"all {x(g.get('all'))}; slower than compile: "
                 f"{len(s.get('slower_than_torch_compile', []))}; by status {s.get('by_status', {})}")
    return "\n".join(lines)
