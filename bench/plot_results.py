#!/usr/bin/env python3
"""Speedup chart of one benchmark results file (bench/results/<suite>-<device>-<date>.json):
one group of bars per case, one bar per baseline (baseline time / FACT time, >1 = FACT faster),
cases without a FACT kernel marked with their status.

Usage: plot_results.py results.json out.png
Exit code 3 when matplotlib is not installed.
"""
import json
import sys

from plot_common import pyplot_or_exit_code


def main(argv):
    plt, exit_code = pyplot_or_exit_code(argv, __doc__)
    if plt is None:
        return exit_code

    with open(argv[1]) as f:
        results = json.load(f)
    cases = results["cases"]
    baselines = sorted({name for c in cases for name in c.get("baselines", {})})
    labels = ["%s\n(%s)" % (c["name"], c["precision"]) for c in cases]
    width = 0.8 / max(1, len(baselines))

    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(cases) + 2), 6))
    for b_index, name in enumerate(baselines):
        xs, ys = [], []
        for i, c in enumerate(cases):
            ratio = c.get("speedup", {}).get(name)
            if ratio is not None:
                xs.append(i + (b_index - (len(baselines) - 1) / 2) * width)
                ys.append(ratio)
        bars = ax.bar(xs, ys, width=width, label="vs %s" % name)
        for x, y in zip(xs, ys):
            ax.text(x, y, "%.2f" % y, ha="center", va="bottom", fontsize=7)
    for i, c in enumerate(cases):
        if c.get("fact_ms") is None:
            ax.text(i, 0.05, c.get("status", "no kernel"), rotation=90, ha="center", va="bottom",
                    fontsize=8, color="tab:red")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("speedup (baseline ms / FACT ms)")
    versions = results.get("versions", {})
    ax.set_title("FACT %s suite on %s, %s\nCUDA %s, driver %s, CUTLASS %s, fact %s" % (
        results.get("suite"), results.get("device"), results.get("date"), versions.get("cuda"),
        versions.get("driver"), versions.get("cutlass"), versions.get("fact")), fontsize=9)
    if baselines:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
