#!/usr/bin/env python3
"""Charts of one compose results file (bench/results/compose-<device>-<date>.json):
<prefix>-speedup.png, FACT's speedup (baseline ms / FACT ms, >1 = FACT faster) for the
end-to-end variants and each subgraph, one bar per baseline; <prefix>-ablation.png, the
end-to-end time of each rule alone and all rules against eager.

Usage: plot_compose.py results.json out_prefix
Exit code 3 when matplotlib is not installed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for plot_common
from plot_common import pyplot_or_exit_code  # noqa: E402


def _title(doc: dict, what: str) -> str:
    v = doc.get("versions", {})
    return (f"FACT compose: {what} on {doc.get('device')}, {doc.get('date')}\n"
            f"torch {v.get('torch')}, CUDA {v.get('cuda')}, driver {v.get('driver')}, "
            f"CUTLASS {v.get('cutlass')}, fact {v.get('fact')}")


def plot_speedups(plt, doc: dict, path: Path) -> bool:
    cases = [c for c in doc.get("cases", []) if c.get("stage") in ("timing", "subgraphs")]
    baselines = sorted({name for c in cases for name in c.get("speedup", {})})
    if not cases or not baselines:
        return False
    width = 0.8 / len(baselines)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(cases) + 2), 6))
    for b_index, name in enumerate(baselines):
        xs, ys = [], []
        for i, c in enumerate(cases):
            if name in c.get("speedup", {}):
                xs.append(i + (b_index - (len(baselines) - 1) / 2) * width)
                ys.append(c["speedup"][name])
        ax.bar(xs, ys, width=width, label=f"vs {name}")
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
    for i, c in enumerate(cases):
        if c.get("fact_ms") is None:
            ax.text(i, 0.05, c.get("status", "no time"), rotation=90, ha="center", va="bottom",
                    fontsize=8, color="tab:red")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c["name"] for c in cases], rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("speedup (baseline ms / FACT ms)")
    ax.set_title(_title(doc, "speedups"), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_ablation(plt, doc: dict, path: Path) -> bool:
    cases = [c for c in doc.get("cases", []) if c.get("stage") == "ablation"]
    timed = [c for c in cases if c.get("fact_ms") is not None]
    if not timed:
        return False
    eager_ms = next((c["baselines"]["torch_eager"]["ms"] for c in timed
                     if c.get("baselines", {}).get("torch_eager", {}).get("ms")), None)
    labels = ["eager"] + [c["name"].removeprefix("ablation_") for c in cases]
    values = [eager_ms or 0.0] + [c.get("fact_ms") or 0.0 for c in cases]
    colors = ["tab:gray"] + ["tab:blue" if c.get("fact_ms") is not None else "tab:red" for c in cases]
    fig, ax = plt.subplots(figsize=(max(7, 1.2 * len(labels) + 2), 5))
    bars = ax.bar(range(len(labels)), values, color=colors)
    for bar, case in zip(bars[1:], cases):
        ratio = case.get("speedup", {}).get("torch_eager")
        text = f"{ratio:.2f}x" if ratio else case.get("status", "")
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), text, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("ms per forward (median)")
    ax.set_title(_title(doc, "ablation (label: speedup vs eager)"), fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_all(doc: dict, prefix: Path, plt=None) -> list[Path]:
    """Writes the charts the document has data for; returns their paths. Raises ImportError
    without matplotlib."""
    if plt is None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    written = []
    for suffix, plot in (("speedup", plot_speedups), ("ablation", plot_ablation)):
        path = Path(f"{prefix}-{suffix}.png")
        if plot(plt, doc, path):
            written.append(path)
    return written


def main(argv: list[str]) -> int:
    plt, exit_code = pyplot_or_exit_code(argv, __doc__)
    if plt is None:
        return exit_code
    with open(argv[1]) as f:
        doc = json.load(f)
    for path in plot_all(doc, Path(argv[2]), plt):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
