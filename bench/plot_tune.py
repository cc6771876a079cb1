#!/usr/bin/env python3
"""Scatter plot of one tuning run: every timed configuration's median time (p10-p90 bars),
the winner starred, the library baselines as horizontal lines.

Usage: plot_tune.py tune-<problem>.json out.png   (the JSON written by `fact tune`)
Exit code 3 when matplotlib is not installed (the caller then keeps only the CSV).
"""
import json
import sys

from plot_common import pyplot_or_exit_code


def main(argv):
    plt, exit_code = pyplot_or_exit_code(argv, __doc__)
    if plt is None:
        return exit_code

    with open(argv[1]) as f:
        result = json.load(f)
    candidates = result["candidates"]
    timed = [(i, c) for i, c in enumerate(candidates) if c.get("ms")]
    excluded = {}
    for c in candidates:
        if c["status"] != "ok":
            excluded[c["status"]] = excluded.get(c["status"], 0) + 1

    fig, ax = plt.subplots(figsize=(10, 5.5))
    ok = [(i, c) for i, c in timed if c["status"] == "ok" and not c.get("best")]
    if ok:
        xs = [i for i, _ in ok]
        ys = [c["ms"]["median"] for _, c in ok]
        low = [c["ms"]["median"] - c["ms"]["p10"] for _, c in ok]
        high = [c["ms"]["p90"] - c["ms"]["median"] for _, c in ok]
        ax.errorbar(xs, ys, yerr=[low, high], fmt="o", color="tab:blue", ms=5, alpha=0.8,
                    elinewidth=0.8, label="verified configuration")
    other = [(i, c) for i, c in timed if c["status"] != "ok"]
    if other:
        ax.scatter([i for i, _ in other], [c["ms"]["median"] for _, c in other], marker="x",
                   color="tab:red", label="timed but excluded")
    best = [(i, c) for i, c in timed if c.get("best")]
    for i, c in best:
        ax.scatter([i], [c["ms"]["median"]], marker="*", s=320, color="gold", edgecolors="black",
                   zorder=5, label="best: %s (%.4f ms)" % (c["config"], c["ms"]["median"]))

    has_epilogue = result.get("key", {}).get("epilogue", "none") != "none"
    styles = ["--", ":", "-."]
    for n, (name, b) in enumerate(sorted(result.get("baselines", {}).items())):
        if b.get("status") == "ok" and b.get("ms"):
            ax.axhline(b["ms"], linestyle=styles[n % len(styles)], color="dimgray",
                       label="%s%s: %.4f ms" % (name, " (fused epilogue)" if has_epilogue and b.get("fused") else "",
                                                 b["ms"]))

    title = "%s — %d configurations, %d timed" % (result["problem"], len(candidates), len(timed))
    if excluded:
        title += "\nexcluded: " + ", ".join("%s %d" % kv for kv in sorted(excluded.items()))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("configuration (space order)")
    ax.set_ylabel("median time (ms), p10-p90 bars")
    ax.grid(True, alpha=0.3)
    if timed or result.get("baselines"):
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
