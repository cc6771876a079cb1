"""Markdown report of one compose results document (compose_results.py): the setup and
versions, the stages, what was composed (per optimize call: each replacement's calls with their
kernel configuration, and the error measured against the subgraph each replaced), the
verification against float64, the end-to-end timing table, the per-subgraph table, the
ablation and the host overhead.
"""
from __future__ import annotations

import json
from typing import Any, Iterable


def _number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.2e}"
        return f"{value:.{digits}f}"
    return str(value)


def _cell(value: Any) -> str:
    if isinstance(value, list):
        text = ", ".join(map(str, value))
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={v}" for k, v in value.items())
    else:
        text = _number(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _spread(stats: dict | None) -> str:
    if not stats or stats.get("p10_ms") is None:
        return "–"
    return f"{stats['p10_ms']:.4f}–{stats['p90_ms']:.4f}"


def _cases(doc: dict, stage: str) -> list[dict]:
    return [c for c in doc.get("cases", []) if c.get("stage") == stage]


def _status(case: dict) -> str:
    return case.get("status", "?") + (f" ({case['reason']})" if case.get("reason") else "")


def _speedups(case: dict, names: list[str]) -> list[str]:
    return [f"{case['speedup'][n]:.2f}x" if n in case.get("speedup", {}) else "–" for n in names]


def _composition_key(report: dict) -> str:
    rows = [{k: v for k, v in c.items() if k != "nodes"} for c in report.get("composed", [])]
    return json.dumps([rows, report.get("left_to_pytorch", [])], sort_keys=True, default=str)


def _composition_section(doc: dict) -> list[str]:
    """One line per fact.optimize call, then each distinct composition once."""
    lines = ["## What was composed", ""]
    reports = doc.get("reports", {})
    if not reports:
        return lines + ["No fact.optimize call ran.", ""]
    lines += _table(["fact.optimize call", "precision", "replacements composed", "left to PyTorch",
                     "remainder", "CUDA graphs", "runs", "fact::launch implementation"],
                    ([label, r.get("precision"), len(r.get("composed", [])), len(r.get("left_to_pytorch", [])),
                      r.get("remainder"), r.get("cuda_graphs"), r.get("runs"), r.get("op_implementation")]
                     for label, r in reports.items()))
    groups: dict[str, list[str]] = {}
    for label, report in reports.items():
        groups.setdefault(_composition_key(report), []).append(label)
    for labels in groups.values():
        report = reports[labels[0]]
        composed, left = report.get("composed", []), report.get("left_to_pytorch", [])
        lines += [f"### {', '.join(labels)}", ""]
        if composed:
            rows = ([c.get("label"), c.get("rule"), call.get("label"), call.get("summary"),
                     c.get("implementation"), call.get("config"), call.get("config_source"),
                     c.get("rel_err"), c.get("tolerance")]
                    for c in composed for call in c.get("calls", []))
            lines += _table(["replacement", "rule", "call", "summary", "implementation", "config",
                             "config source", "rel_err", "tolerance"], rows)
        if left:
            lines += _table(["left to PyTorch", "reason"], ([i.get("what"), i.get("reason")] for i in left))
        for note in report.get("notes", []) or []:
            lines += [f"- note: {note}"]
        if "text" in report:
            lines += ["```", report["text"], "```", ""]
        lines.append("")
    return lines


def _summary_section(doc: dict) -> list[str]:
    """The headline numbers, each from the tables below."""
    lines = []
    for c in _cases(doc, "verify"):
        v = c.get("verification")
        if v:
            lines.append(f"- verification {c['precision']}: FACT rel_err {_number(v.get('fact_rel_err'))} vs "
                         f"PyTorch {_number(v.get('torch_rel_err'))}: {'pass' if v.get('passed') else 'FAIL'}")
        else:
            lines.append(f"- verification {c['precision']}: {_status(c)}")
    for c in _cases(doc, "timing"):
        if c.get("fact_ms") is not None:
            ratios = ", ".join(f"{r:.2f}x vs {n}" for n, r in c.get("speedup", {}).items())
            lines.append(f"- {c['name']}: {c['fact_ms']:.3f} ms ({ratios or 'no baseline'})")
        else:
            lines.append(f"- {c['name']}: {_status(c)}")
    subgraphs = [c for c in _cases(doc, "subgraphs") if c.get("at_least_as_fast_as_max_autotune") is not None]
    if subgraphs:
        met = sum(1 for c in subgraphs if c["at_least_as_fast_as_max_autotune"])
        lines.append(f"- subgraphs at least as fast as Inductor max-autotune: {met} of {len(subgraphs)}")
    for c in _cases(doc, "ablation"):
        if c.get("fact_ms") is not None and "torch_eager" in c.get("speedup", {}):
            lines.append(f"- {c['name']}: {c['speedup']['torch_eager']:.2f}x vs eager")
    for c in _cases(doc, "overhead"):
        if c.get("host_us_per_forward") is not None and c.get("ratio_to_eager") is not None:
            lines.append(f"- {c['name']}: {c['host_us_per_forward']:.1f} µs host time per forward, "
                         f"{c['ratio_to_eager']:.2f}x eager's {c['eager_host_us_per_forward']:.1f} µs"
                         + (f", {c['ratio_to_same_graph']:.2f}x the same exported graph's"
                            if c.get("ratio_to_same_graph") is not None else ""))
    if not lines:
        return []
    return ["## Summary", ""] + lines + [""]


def _verification_section(doc: dict) -> list[str]:
    cases = _cases(doc, "verify")
    if not cases:
        return []
    lines = ["## Verification against float64 (fresh inputs, at the benchmark size)", ""]
    rows = []
    for c in cases:
        v = c.get("verification", {})
        torch_error = c.get("baselines", {}).get("torch_eager", {}).get("rel_err")
        rows.append([c["precision"], v.get("dtype"), c.get("rel_err"), torch_error, v.get("passed"),
                     v.get("criterion"), v.get("optimize_s"), v.get("composed"), v.get("left_to_pytorch"),
                     _status(c)])
    return lines + _table(["mode", "model dtype", "FACT rel_err", "PyTorch rel_err", "pass", "criterion",
                           "optimize s", "replacements composed", "left to PyTorch", "status"], rows)


def _timing_section(doc: dict) -> list[str]:
    measured = doc.get("timing_variants", {})
    if not measured:
        return []
    lines = ["## End-to-end time, bf16 (native)", "", doc.get("setup", {}).get("timing_note", ""), ""]
    eager_ms = (measured.get("eager", {}).get("stats") or {}).get("median_ms")
    rows = []
    for variant, entry in measured.items():
        stats = entry.get("stats") or {}
        ms = stats.get("median_ms")
        rows.append([variant, ms, _spread(stats), entry.get("rel_err"), entry.get("optimize_s"),
                     entry.get("first_call_s"), (eager_ms / ms) if ms and eager_ms else None,
                     entry.get("status", "?") + (f" ({entry['reason']})" if entry.get("reason") else "")])
    lines += _table(["variant", "median ms", "p10–p90 ms", "rel_err vs float64", "optimize s",
                     "first call s", "speedup vs eager", "status"], rows)
    cases = _cases(doc, "timing")
    names = ["torch_eager", "torch_compile", "torch_compile_max_autotune"]
    lines += ["Speedup of each FACT variant (baseline ms / FACT ms):", ""]
    lines += _table(["FACT variant", "ms"] + [f"vs {n}" for n in names],
                    ([c["name"], c.get("fact_ms")] + _speedups(c, names) for c in cases))
    return lines


def _subgraph_section(doc: dict) -> list[str]:
    cases = _cases(doc, "subgraphs")
    if not cases:
        return []
    lines = ["## Per subgraph: each replacement's fact::launch calls alone vs the subgraph it replaced", "",
             "Goal: every replaced subgraph at least as fast as Inductor max-autotune's code for it.", ""]
    rows = []
    for c in cases:
        b = c.get("baselines", {})
        eager, tuned = b.get("torch_eager", {}), b.get("torch_compile_max_autotune", {})
        rows.append([c["name"], c.get("config"), c.get("fact_ms"), _spread(c.get("timing")), eager.get("ms"),
                     tuned.get("ms"), *_speedups(c, ["torch_eager", "torch_compile_max_autotune"]),
                     c.get("at_least_as_fast_as_max_autotune"), c.get("rel_err"), tuned.get("rel_err"),
                     _status(c)])
    return lines + _table(["subgraph", "kernel", "FACT ms", "p10–p90", "eager ms", "max-autotune ms",
                           "vs eager", "vs max-autotune", "goal met", "FACT rel_err",
                           "max-autotune rel_err", "status"], rows)


def _ablation_section(doc: dict) -> list[str]:
    cases = _cases(doc, "ablation")
    if not cases:
        return []
    remainder = doc.get("setup", {}).get("ablation_remainder", "?")
    lines = ["## Ablation: each rule alone, then all (bf16, remainder " + remainder + ")", ""]
    rows = [[c["name"].removeprefix("ablation_"), c.get("fact_ms"), _spread(c.get("timing")),
             c.get("baselines", {}).get("torch_eager", {}).get("ms"), *_speedups(c, ["torch_eager"]),
             c.get("rel_err"), "; ".join(c.get("composed", []) or []), _status(c)] for c in cases]
    return lines + _table(["rules", "FACT ms", "p10–p90", "eager ms", "speedup vs eager", "rel_err",
                           "composed", "status"], rows)


def _overhead_section(doc: dict) -> list[str]:
    cases = _cases(doc, "overhead")
    if not cases:
        return []
    overhead = doc.get("overhead", {})
    eager = (overhead.get("measured", {}).get("eager", {}).get("stats") or {})
    lines = [f"## Host overhead per forward (size {overhead.get('size', '?')}, GPU work negligible)", ""]
    if eager.get("timer"):
        lines += [eager["timer"], ""]
    def micro(value):
        return f"{value:.1f}" if value is not None else None

    same = (overhead.get("measured", {}).get("same_graph", {}).get("stats") or {})
    same_ms = same.get("median_ms")
    rows = [["eager (the module)", micro(eager["median_ms"] * 1e3) if eager.get("median_ms") else None,
             1.0 if eager else None, (same_ms and eager.get("median_ms") and eager["median_ms"] / same_ms) or None,
             "ok" if eager else "–"]]
    if same_ms:
        rows.append(["eager (its exported graph, no FACT op, no guard)", micro(same_ms * 1e3),
                     same_ms / eager["median_ms"] if eager.get("median_ms") else None, 1.0, "ok"])
    rows += [[c["name"], micro(c.get("host_us_per_forward")), c.get("ratio_to_eager"),
              c.get("ratio_to_same_graph"), _status(c)] for c in cases]
    return lines + _table(["variant", "µs per forward", "ratio to eager", "ratio to the same graph", "status"], rows)


def render_report(doc: dict) -> str:
    versions = doc.get("versions", {})
    setup = doc.get("setup", {})
    lines = [f"# FACT composition benchmark: minGPT block on {doc.get('device')} ({doc.get('date')})", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), "",
             f"Model: {setup.get('model')}, B={setup.get('batch')}, T={setup.get('seq_len')}, "
             f"C={setup.get('embed')}, {setup.get('heads')} heads; device {setup.get('device')}; "
             f"fact.optimize tune={setup.get('tune')}; run time {doc.get('elapsed_s', '?')} s of a "
             f"{setup.get('time_budget_s')} s budget.", ""]
    lines += _summary_section(doc)
    stages = doc.get("stages", {})
    if stages:
        lines += ["## Stages", ""]
        lines += _table(["stage", "status", "seconds", "reason"],
                        ([name, s.get("status"), f"{s.get('seconds', 0):.1f}", s.get("reason")]
                         for name, s in stages.items()))
    for section in (_verification_section, _timing_section, _subgraph_section, _ablation_section,
                    _overhead_section, _composition_section):
        lines += section(doc)
    for plot in doc.get("plots", []):
        lines += [f"![{plot}]({plot})", ""]
    return "\n".join(lines).rstrip() + "\n"
