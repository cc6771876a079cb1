"""`python -m fact.plots PATH`: FACT's plots, drawn where its reports are rendered.

PATH a `fact optimize` output folder: the plots of its report, written as PNG files beside
report.md, a "Plots" section appended to report.md that embeds them, and report.html: the whole
report as one HTML file (plots inlined) that opens in a browser.

    roofline.png        every kernel call on the device profile's roofline: its bound, and where
                        it sits when it was timed (always drawn; without a timed kernel, e.g. no
                        GPU, the plot says it shows bounds only)
    e2e_speedup.png     the composed module's speedup against eager / torch.compile /
                        torch.compile max-autotune (when e2e.json exists: a GPU run)
    kernel_speedup.png  each tuned kernel call's speedup against each library baseline
    tuning_scatter.png  each tuned call: every configuration's TFLOP/s, the chosen one and the
                        baselines marked (when tuning ran)

PATH a `fact tune` report's tune-<problem>.json: tune-<problem>.png beside it, every timed
configuration's median time (p10-p90 bars), the winner starred, the library baselines as lines.

PATH a `fact bench` results file (bench/results/<suite>-<device>-<date>.json): <same name>.png,
one group of bars per case, one bar per baseline (baseline time / FACT time).

The engine writes data only and starts no script; `fact optimize` calls write_report_plots with
its documents in memory, `fact tune` and `fact bench` name this command. Without matplotlib the
plots are skipped with that reason and report.html is still written. Third-party output goes to
$FACT_LOG_DIR/plots.log (else <out>/logs/plots.log).
"""
from __future__ import annotations

import argparse
import base64
import html
import json
import re
import sys
from pathlib import Path
from typing import Sequence

from fact.console import RunLog, default_log_path, verbose_from_environment

PLOTS_HEADING = "## Plots"
ROOFLINE_BOUNDS_ONLY = "bounds only, nothing measured"
ROOFLINE_BOUNDS_ONLY_WHY = ("no kernel was timed in this run (no GPU, or tuning off), so each point is "
                            "the call's bound, not a measurement")
VARIANTS = [("torch_eager", "eager"), ("torch_compile", "torch.compile"),
            ("torch_compile_max_autotune", "torch.compile\nmax-autotune")]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bar_labels(ax, bars, values, fmt="{:.2f}x") -> None:
    for bar, value in zip(bars, values):
        ax.annotate(fmt.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")


def plot_e2e(e2e: dict, path: Path) -> str | None:
    """Speedup bars of the composed module against each baseline; the caption, or None."""
    case = e2e["cases"][0]
    names, values = [], []
    for key, label in VARIANTS:
        if case.get("speedup", {}).get(key):
            names.append(label)
            values.append(case["speedup"][key])
    if not values:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar(names, values, color=["#4c72b0" if v >= 1 else "#c44e52" for v in values])
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    _bar_labels(ax, bars, values)
    ax.set_ylabel("FACT speedup (baseline ms / FACT ms)")
    ax.set_title(f"End to end on {e2e.get('device', '?')} ({case.get('precision', '')})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "End-to-end speedup of the composed module (above 1: FACT is faster)"


def _tuned(report: dict) -> list[dict]:
    return [t for t in report.get("tuning", []) if isinstance(t.get("best"), dict)]


def plot_kernel_speedups(report: dict, path: Path) -> str | None:
    """Per tuned call, the speedup against each library baseline timed in the same run."""
    rows = []
    for t in _tuned(report):
        best_ms = (t["best"].get("ms") or {}).get("median")
        if not best_ms:
            continue
        for name, base in (t.get("baselines") or {}).items():
            if base.get("ms"):
                rows.append((t.get("call", "?"), name, base["ms"] / best_ms))
    if not rows:
        return None
    plt = _pyplot()
    calls = list(dict.fromkeys(r[0] for r in rows))
    baselines = list(dict.fromkeys(r[1] for r in rows))
    width = 0.8 / len(baselines)
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(calls) + 2), 3.5))
    for j, name in enumerate(baselines):
        xs = [calls.index(c) + j * width for c, b, _ in rows if b == name]
        ys = [v for _, b, v in rows if b == name]
        bars = ax.bar(xs, ys, width=width, label=f"vs {name}")
        _bar_labels(ax, bars, ys)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(calls))], calls)
    ax.set_xlabel("kernel call")
    ax.set_ylabel("speedup (baseline ms / FACT ms)")
    ax.legend(fontsize=8)
    ax.set_title("Each tuned kernel against the library baselines (same run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "Per-kernel speedup of FACT's tuned kernel against each baseline"


def plot_tuning_scatter(report: dict, path: Path) -> str | None:
    """Every configuration's TFLOP/s per tuned call; the chosen one and the baselines marked."""
    tuned = [t for t in _tuned(report) if any(c.get("tflops") for c in t.get("candidates", []))]
    if not tuned:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(tuned) + 2), 4))
    for i, t in enumerate(tuned):
        values = [c["tflops"] for c in t["candidates"] if c.get("tflops")]
        xs = [i + 0.25 * ((k % 7) - 3) / 3 for k in range(len(values))]
        ax.scatter(xs, values, s=14, alpha=0.6, color="#4c72b0", label="configuration" if i == 0 else None)
        if t["best"].get("tflops"):
            ax.scatter([i], [t["best"]["tflops"]], s=80, marker="*", color="#dd8452",
                       label="chosen" if i == 0 else None, zorder=3)
        for name, base in (t.get("baselines") or {}).items():
            if base.get("tflops"):
                ax.hlines(base["tflops"], i - 0.35, i + 0.35, colors="#55a868", linewidth=1.5,
                          label="baselines" if i == 0 and name == next(iter(t["baselines"])) else None)
    ax.set_xticks(range(len(tuned)), [t.get("call", "?") for t in tuned])
    ax.set_xlabel("kernel call")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=8)
    ax.set_title("Tuning: every verified configuration", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "Tuning scatter: each configuration's TFLOP/s (star: chosen; lines: library baselines)"


def plot_roofline(report: dict, path: Path) -> str | None:
    """The roofline of the device profile with every call's bound, and its measured point."""
    points = [p for p in report.get("roofline", []) if p.get("min_bytes") and p.get("flops")]
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    memory = points[0]["memory_ceiling_bytes_per_s"]
    intensities = [p["intensity_flop_per_byte"] for p in points]
    lo = min(intensities + [p["ridge_flop_per_byte"] for p in points]) / 4
    hi = max(intensities + [p["ridge_flop_per_byte"] for p in points]) * 4
    for ceiling in sorted({p["compute_ceiling_flops_per_s"] for p in points}):
        xs = [lo, ceiling / memory, hi]
        ax.plot(xs, [min(x * memory, ceiling) / 1e12 for x in xs], color="gray", linewidth=1)
        ax.annotate(f"{ceiling / 1e12:.0f} TFLOP/s", (hi, ceiling / 1e12), ha="right", va="bottom", fontsize=7)
    for p in points:
        bound_rate = p["flops"] / p["bound_seconds"] / 1e12 if p["bound_seconds"] else 0
        ax.scatter([p["intensity_flop_per_byte"]], [bound_rate], marker="o", facecolors="none",
                   edgecolors="#4c72b0", s=40)
        if p.get("achieved_flops_per_s"):
            ax.scatter([p["intensity_flop_per_byte"]], [p["achieved_flops_per_s"] / 1e12], marker="o",
                       color="#dd8452", s=40)
        ax.annotate(p["label"], (p["intensity_flop_per_byte"], bound_rate), fontsize=8,
                    xytext=(4, -10), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    name = report.get("device_profile", {}).get("name", "?")
    measured = any(p.get("achieved_flops_per_s") for p in points)
    if measured:
        ax.set_title(f"Roofline of {name} (open: bound; filled: measured)", fontsize=10)
    else:
        ax.set_title(f"Roofline of {name}: {ROOFLINE_BOUNDS_ONLY}", fontsize=10)
        ax.text(0.02, 0.97, ROOFLINE_BOUNDS_ONLY_WHY, transform=ax.transAxes, ha="left", va="top",
                fontsize=8, color="#c44e52", bbox={"facecolor": "white", "edgecolor": "#c44e52"})
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    if not measured:
        return f"Each kernel call on the device profile's roofline, {ROOFLINE_BOUNDS_ONLY}: {ROOFLINE_BOUNDS_ONLY_WHY}"
    return "Each kernel call on the device profile's roofline (open circle: its bound; filled: measured)"


def plot_tune(result: dict, path: Path) -> str | None:
    """One tuning run (a `fact tune` report's JSON): every timed configuration's median time
    with p10-p90 bars, excluded ones crossed, the winner starred, the library baselines as
    horizontal lines. The caption, or None when no configuration was timed."""
    candidates = result.get("candidates", [])
    timed = [(i, c) for i, c in enumerate(candidates) if c.get("ms")]
    if not timed:
        return None
    excluded: dict[str, int] = {}
    for c in candidates:
        if c.get("status") != "ok":
            excluded[c.get("status", "?")] = excluded.get(c.get("status", "?"), 0) + 1
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    ok = [(i, c) for i, c in timed if c.get("status") == "ok" and not c.get("best")]
    if ok:
        ys = [c["ms"]["median"] for _, c in ok]
        low = [c["ms"]["median"] - c["ms"].get("p10", c["ms"]["median"]) for _, c in ok]
        high = [c["ms"].get("p90", c["ms"]["median"]) - c["ms"]["median"] for _, c in ok]
        ax.errorbar([i for i, _ in ok], ys, yerr=[low, high], fmt="o", color="tab:blue", ms=5, alpha=0.8,
                    elinewidth=0.8, label="verified configuration")
    other = [(i, c) for i, c in timed if c.get("status") != "ok"]
    if other:
        ax.scatter([i for i, _ in other], [c["ms"]["median"] for _, c in other], marker="x",
                   color="tab:red", label="timed but excluded")
    for i, c in timed:
        if c.get("best"):
            ax.scatter([i], [c["ms"]["median"]], marker="*", s=320, color="gold", edgecolors="black", zorder=5,
                       label=f"best: {c.get('config', '?')} ({c['ms']['median']:.4f} ms)")
    has_epilogue = (result.get("key") or {}).get("epilogue", "none") != "none"
    styles = ["--", ":", "-."]
    for n, (name, b) in enumerate(sorted((result.get("baselines") or {}).items())):
        if b.get("status") == "ok" and b.get("ms"):
            fused = " (fused epilogue)" if has_epilogue and b.get("fused") else ""
            ax.axhline(b["ms"], linestyle=styles[n % len(styles)], color="dimgray",
                       label=f"{name}{fused}: {b['ms']:.4f} ms")
    title = f"{result.get('problem', '?')}: {len(candidates)} configurations, {len(timed)} timed"
    if excluded:
        title += "\nexcluded: " + ", ".join(f"{k} {v}" for k, v in sorted(excluded.items()))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("configuration (space order)")
    ax.set_ylabel("median time (ms), p10-p90 bars")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "Every timed configuration's median time (star: the chosen one; lines: library baselines)"


def plot_bench_results(results: dict, path: Path) -> str | None:
    """One benchmark results file: per case, one bar per baseline (baseline ms / FACT ms); cases
    without a FACT kernel marked with their status. The caption, or None without cases."""
    cases = results.get("cases", [])
    if not cases:
        return None
    plt = _pyplot()
    baselines = sorted({name for c in cases for name in c.get("baselines", {})})
    width = 0.8 / max(1, len(baselines))
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(cases) + 2), 6))
    for b_index, name in enumerate(baselines):
        xs, ys = [], []
        for i, c in enumerate(cases):
            ratio = (c.get("speedup") or {}).get(name)
            if ratio is not None:
                xs.append(i + (b_index - (len(baselines) - 1) / 2) * width)
                ys.append(ratio)
        ax.bar(xs, ys, width=width, label=f"vs {name}")
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
    for i, c in enumerate(cases):
        if c.get("fact_ms") is None:
            ax.text(i, 0.05, c.get("status", "no kernel"), rotation=90, ha="center", va="bottom",
                    fontsize=8, color="tab:red")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{c.get('name', '?')}\n({c.get('precision', '')})" for c in cases],
                       rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("speedup (baseline ms / FACT ms)")
    v = results.get("versions", {})
    ax.set_title(f"FACT {results.get('suite')} suite on {results.get('device')}, {results.get('date')}\n"
                 f"CUDA {v.get('cuda')}, driver {v.get('driver')}, CUTLASS {v.get('cutlass')}, fact {v.get('fact')}",
                 fontsize=9)
    if baselines:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "Speedup of each case against each baseline (above 1: FACT is faster)"


def draw(out: Path, report: dict, e2e: dict | None) -> tuple[list[tuple[str, str]], str]:
    """Draws every plot the data allow: ([(file name, caption)], why none could be drawn or "")."""
    try:
        _pyplot()
    except ImportError as error:
        return [], f"matplotlib is not available ({error}); pip install matplotlib"
    drawn = []
    jobs = [("roofline.png", lambda p: plot_roofline(report, p))]
    if e2e:
        jobs.append(("e2e_speedup.png", lambda p: plot_e2e(e2e, p)))
    jobs += [("kernel_speedup.png", lambda p: plot_kernel_speedups(report, p)),
             ("tuning_scatter.png", lambda p: plot_tuning_scatter(report, p))]
    for name, job in jobs:
        caption = job(out / name)
        if caption:
            drawn.append((name, caption))
    return drawn, ""


def plots_section(drawn: list[tuple[str, str]], why_not: str, missing: list[str]) -> str:
    lines = ["", PLOTS_HEADING, ""]
    if why_not:
        lines.append(f"Not drawn: {why_not}.")
    for name, caption in drawn:
        lines += [f"{caption}:", "", f"![{caption}]({name})", ""]
    if missing:
        lines.append("Not drawn here: " + "; ".join(missing) + ".")
    return "\n".join(lines).rstrip() + "\n"


# --- Markdown (the subset report.md uses) to one HTML file --------------------------------------

# Nothing may be wider than the page. A table cell holding a long word (a kernel name, a
# configuration, a problem) is marked "long" and breaks it anywhere; other cells wrap at spaces
# only, so short words ("ADAPT", "1a", "4.02") stay whole. Preformatted text wraps, images scale.
LONG_WORD = 20
REPORT_CSS = ("*{box-sizing:border-box}"
              "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;"
              "line-height:1.45}"
              "table{border-collapse:collapse;margin:1em 0;font-size:0.9em;max-width:100%}"
              "td,th{border:1px solid #ccc;padding:0.25em 0.5em;text-align:left;vertical-align:top;"
              "overflow-wrap:break-word}"
              "td.long{overflow-wrap:anywhere}"
              "th{background:#f3f3f3}"
              "pre{background:#f6f8fa;padding:0.8em;font-size:0.85em;white-space:pre-wrap;"
              "overflow-wrap:anywhere;max-width:100%}"
              "code{background:#f6f8fa;padding:0 0.2em}"
              "p,li{overflow-wrap:anywhere}img{max-width:100%;height:auto}")


def _cell(tag: str, text: str, folder: Path) -> str:
    long = tag == "td" and any(len(word) > LONG_WORD for word in text.split())
    attributes = ' class="long"' if long else ""
    return f"<{tag}{attributes}>{_inline(text, folder)}</{tag}>"

_INLINE = [(re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
           (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
           (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])"), r"<em>\1</em>")]


def _inline(text: str, folder: Path) -> str:
    def image(match: re.Match) -> str:
        alt, target = match.group(1), match.group(2)
        file = folder / target
        if file.is_file():
            data = base64.b64encode(file.read_bytes()).decode()
            return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
        return f'<img alt="{html.escape(alt)}" src="{html.escape(target)}">'

    images: list[str] = []

    def keep(match: re.Match) -> str:
        images.append(image(match))
        return f"\x00{len(images) - 1}\x00"

    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", keep, text)
    text = html.escape(text, quote=False)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return re.sub(r"\x00(\d+)\x00", lambda m: images[int(m.group(1))], text)


def markdown_to_html(markdown: str, folder: Path, title: str) -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           f"<style>{REPORT_CSS}</style></head><body>"]
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            block = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(lines[i])
                i += 1
            out.append("<pre>" + html.escape("\n".join(block)) + "</pre>")
            i += 1
            continue
        heading = re.match(r"^(#{1,6}) (.*)", line)
        if heading:
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2), folder)}</h{level}>")
            i += 1
            continue
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", r.strip())[1:-1]] for r in rows]
            body = [r for r in cells if not all(re.fullmatch(r":?-+:?", c) for c in r)]
            out.append("<table>")
            for k, row in enumerate(body):
                tag = "th" if k == 0 else "td"
                out.append("<tr>" + "".join(_cell(tag, c, folder) for c in row) + "</tr>")
            out.append("</table>")
            continue
        if line.startswith("- "):
            out.append("<ul>")
            while i < len(lines) and lines[i].startswith("- "):
                item = lines[i][2:]
                i += 1
                while i < len(lines) and lines[i].startswith("  ") and lines[i].strip():
                    item += " " + lines[i].strip()
                    i += 1
                out.append(f"<li>{_inline(item, folder)}</li>")
            out.append("</ul>")
            continue
        if not line.strip():
            i += 1
            continue
        paragraph = [line]
        i += 1
        while i < len(lines) and lines[i].strip() and not re.match(r"^(#|\||- |```)", lines[i]):
            paragraph.append(lines[i])
            i += 1
        out.append(f"<p>{_inline(' '.join(paragraph), folder)}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report_plots(out: Path, log=print, report: dict | None = None, e2e: dict | None = None) -> list[str]:
    """Draws the plots of the report (report.json's document) and the end-to-end run (e2e.json's),
    appends the Plots section to report.md (replacing an earlier one) and writes report.html;
    returns the PNG file names. `report` None reads <out>/report.json, and then e2e None reads
    <out>/e2e.json when there is one (`python -m fact.plots`); `fact optimize` passes both."""
    out = Path(out)
    if report is None:
        report = json.loads((out / "report.json").read_text())
        e2e_path = out / "e2e.json"
        e2e = json.loads(e2e_path.read_text()) if e2e_path.is_file() else None
    drawn, why_not = draw(out, report, e2e)
    names = {name for name, _ in drawn}
    missing = []
    if "e2e_speedup.png" not in names:
        missing.append("end-to-end speedups (no e2e.json: the end-to-end check runs on a GPU)" if e2e is None
                       else "end-to-end speedups (no baseline was timed)")
    if "kernel_speedup.png" not in names or "tuning_scatter.png" not in names:
        missing.append("per-kernel speedups and the tuning scatter (no kernel was tuned in this run)")
    markdown_path = out / "report.md"
    markdown = markdown_path.read_text() if markdown_path.is_file() else ""
    if PLOTS_HEADING in markdown:
        markdown = markdown[:markdown.index("\n" + PLOTS_HEADING)] + "\n"
    markdown = markdown.rstrip("\n") + "\n" + plots_section(drawn, why_not, [] if why_not else missing)
    markdown_path.write_text(markdown)
    (out / "report.html").write_text(markdown_to_html(markdown, out, f"FACT report: {report.get('model', '')}"))
    for name, caption in drawn:
        log(f"  {name}: {caption}")
    if why_not:
        log(f"  plots not drawn: {why_not}")
    log(f"wrote {out / 'report.html'} (one file, plots inlined)")
    return [name for name, _ in drawn]


def plot_file(path: Path, log=print) -> Path | None:
    """Draws the plot of one JSON document beside it (<stem>.png): a `fact tune` report
    (candidates) or a `fact bench` results file (cases); returns the PNG, or None (said to `log`)
    when there is nothing to plot. Raises ValueError for another document."""
    doc = json.loads(Path(path).read_text())
    png = Path(path).with_suffix(".png")
    if isinstance(doc, dict) and "candidates" in doc:
        caption = plot_tune(doc, png)
        why = "no configuration was timed"
    elif isinstance(doc, dict) and "cases" in doc and "suite" in doc:
        caption = plot_bench_results(doc, png)
        why = "no case"
    else:
        raise ValueError(f"{path}: neither a `fact tune` report (candidates) nor a `fact bench` "
                         f"results file (suite, cases)")
    if caption is None:
        log(f"{path}: nothing to plot ({why})")
        return None
    log(f"wrote {png}: {caption}")
    return png


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.plots", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a `fact optimize` output folder (holding report.json), a `fact tune` "
                                     "report's tune-<problem>.json, or a `fact bench` results file")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(None if argv is None else list(argv))
    path = Path(args.path)
    if path.is_file():
        try:
            _pyplot()
        except ImportError as error:
            print(f"fact.plots: matplotlib is not available ({error}); pip install matplotlib", file=sys.stderr)
            return 3
        try:
            plot_file(path)
        except (ValueError, OSError) as error:
            print(f"fact.plots: error: {error}", file=sys.stderr)
            return 1
        return 0
    out = path
    if not (out / "report.json").is_file():
        print(f"fact.plots: error: no report.json in {out}", file=sys.stderr)
        return 1
    log_path = default_log_path("plots", out)
    with RunLog(log_path, verbose=args.verbose or verbose_from_environment(), title="fact.plots") as run:
        try:
            write_report_plots(out, log=run.say)
        except Exception as error:  # noqa: BLE001 - said on the terminal, traceback in the log
            run.failed(error)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
