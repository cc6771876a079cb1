"""The CPU run (`python -m fact.conformance --cpu`, tests/python/test_conformance.py in CI):
each (corpus file, dtype) at CPU_TEST_SIZES through fact.optimize on the CPU, checked against
float64 (`run_cpu_case`); the coverage table of all of them (`make_table`, `format_table`);
and its comparison with the committed table, corpus/coverage-cpu.json (`baseline_of`,
`dump_baseline`, `compare`, `format_diff`)."""
from __future__ import annotations

import json
import statistics
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from fact.conformance.corpus import (CORPUS_DIR, PRECISION_BY_DTYPE, _first_line,
                                     _single_tensor, build, file_dtypes, float64_output,
                                     load_file, load_json, output_bound, quiet_torch,
                                     relative_error)
from fact.conformance.coverage import _share, counted_gemm_flops, coverage_row


BASELINE_FILE = CORPUS_DIR / "coverage-cpu.json"


TABLE_SCHEMA = "fact.conformance/1"


def run_cpu_case(path: Path, dtype_name: str, work_dir: Path, remainder: str = "eager",
                 seed: int = 0, dynamic: bool = True) -> dict:
    """One (corpus file, dtype) on the CPU at CPU_TEST_SIZES: optimize, compare FACT and
    PyTorch with float64, coverage; then, with `dynamic` and inputs that share a batch
    dimension, the declared-range check (fact.conformance.dynamic: optimized for a batch range,
    called at several sizes, each against float64). Never raises; `status` is "ok", "crash"
    (something raised: fact.optimize, the composed forward) or "wrong" (an output or a
    replacement outside its bound); `problems` says what."""
    from fact.compose import optimize

    path = Path(path)
    precision = PRECISION_BY_DTYPE[dtype_name]
    row: dict = {"model": path.stem, "dtype": dtype_name, "precision": precision, "status": "ok",
                 "problems": []}
    started = time.perf_counter()
    try:
        module = load_file(path)
        model, inputs = build(module, dtype_name, "cpu", seed, getattr(module, "CPU_TEST_SIZES", {}))
        torch_out, counted = counted_gemm_flops(model, inputs)
        torch_out = _single_tensor(torch_out)
    except Exception as error:  # noqa: BLE001 - the model itself is broken: check_corpus' job
        row.update(status="crash", problems=[f"the model does not run: {_first_line(error)}"])
        row["seconds"] = time.perf_counter() - started
        return row
    try:
        with quiet_torch():
            composed = optimize(model, inputs, precision, work_dir=work_dir, remainder=remainder)
    except Exception as error:  # noqa: BLE001 - the thing this test exists to catch
        row.update(status="crash", problems=[f"fact.optimize raised {_first_line(error)}",
                                             traceback.format_exc(limit=-4)])
        row["seconds"] = time.perf_counter() - started
        return row
    report = composed.fact_report
    row["coverage"] = coverage_row(load_json(Path(work_dir) / "plan.json"),
                                   load_json(Path(work_dir) / "graph.json"), report, counted)
    row["runs"] = report.runs
    row["remainder"] = report.remainder
    try:
        with quiet_torch(), torch.no_grad():
            fact_out = _single_tensor(composed(*inputs))
    except Exception as error:  # noqa: BLE001
        row.update(status="crash", problems=[f"the composed module raised {_first_line(error)}",
                                             traceback.format_exc(limit=-4)])
        row["seconds"] = time.perf_counter() - started
        return row
    reference = float64_output(model, inputs)
    torch_error = relative_error(torch_out, reference)
    fact_error = relative_error(fact_out, reference)
    bound = output_bound(precision, torch_error)
    row.update(fact_rel_err=fact_error, torch_rel_err=torch_error, bound=bound)
    problems = []
    if fact_out.shape != torch_out.shape or fact_out.dtype != torch_out.dtype:
        problems.append(f"composed output {tuple(fact_out.shape)} {fact_out.dtype} != original "
                        f"{tuple(torch_out.shape)} {torch_out.dtype}")
    if not fact_error <= bound:
        problems.append(f"output rel_err vs float64 {fact_error:.3g} > bound {bound:.1g} "
                        f"(PyTorch's own: {torch_error:.3g})")
    for entry in report.composed:
        if not entry.verified:
            problems.append(f"composed replacement {entry.label} {entry.rule} was not verified")
        elif entry.rel_err is None or entry.tolerance is None or not entry.rel_err <= entry.tolerance:
            problems.append(f"composed replacement {entry.label} {entry.rule}: rel_err "
                            f"{entry.rel_err} over its tolerance {entry.tolerance}")
    if report.composed and not str(report.runs).startswith("composed"):
        problems.append(f"replacements were composed but the module runs {report.runs}")
    if problems:
        row.update(status="wrong", problems=problems)
    if dynamic:
        from fact.conformance.dynamic import run_dynamic_check
        entry, dynamic_problems, dynamic_status = run_dynamic_check(
            model, inputs, precision, Path(work_dir) / "dynamic", remainder=remainder)
        row["dynamic"] = entry
        if dynamic_problems:
            row["problems"] = row["problems"] + [f"declared range: {p}" for p in dynamic_problems]
        if dynamic_status in ("crash", "wrong") and row["status"] == "ok":
            row["status"] = dynamic_status
    row["seconds"] = time.perf_counter() - started
    return row


# --------------------------------------------------------------------------------------------
# The table


def row_key(row: dict) -> str:
    return f"{row['model']}:{row['dtype']}"


def make_table(rows: Iterable[dict], device: str = "cpu", sizes: str = "CPU_TEST_SIZES") -> dict:
    """The coverage table: one row per (model, dtype), in order, and totals."""
    rows = sorted(rows, key=lambda r: (r["model"], r["dtype"]))
    totals: dict = {"rows": len(rows), "ok": 0, "crash": 0, "wrong": 0, "matches": 0,
                    "composed": 0, "declined": 0, "gemm_flops": 0.0, "fact_flops": 0.0,
                    "rows_with_composition": 0, "declined_by_reason": {}}
    by_dtype: dict = {}
    dynamic_totals: dict = {}
    for row in rows:
        totals[row["status"]] = totals.get(row["status"], 0) + 1
        if row.get("dynamic"):
            state = row["dynamic"].get("status", "?")
            dynamic_totals[state] = dynamic_totals.get(state, 0) + 1
        coverage = row.get("coverage")
        if not coverage:
            continue
        for key in ("matches", "composed", "declined", "gemm_flops", "fact_flops"):
            totals[key] += coverage[key]
        totals["rows_with_composition"] += 1 if coverage["composed"] else 0
        for reason, count in coverage["declined_by_reason"].items():
            totals["declined_by_reason"][reason] = totals["declined_by_reason"].get(reason, 0) + count
        per = by_dtype.setdefault(row["dtype"], {"rows": 0, "composed": 0, "declined": 0,
                                                 "gemm_flops": 0.0, "fact_flops": 0.0, "shares": []})
        per["rows"] += 1
        for key in ("composed", "declined", "gemm_flops", "fact_flops"):
            per[key] += coverage[key]
        if coverage["share"] is not None:
            per["shares"].append(coverage["share"])
    for per in by_dtype.values():
        shares = per.pop("shares")
        per["share"] = per["fact_flops"] / per["gemm_flops"] if per["gemm_flops"] else None
        per["mean_model_share"] = statistics.fmean(shares) if shares else None
    totals["share"] = totals["fact_flops"] / totals["gemm_flops"] if totals["gemm_flops"] else None
    totals["declined_by_reason"] = dict(sorted(totals["declined_by_reason"].items(),
                                               key=lambda kv: (-kv[1], kv[0])))
    totals["by_dtype"] = by_dtype
    totals["dynamic"] = dict(sorted(dynamic_totals.items()))
    return {"schema": TABLE_SCHEMA, "device": device, "sizes": sizes, "torch": torch.__version__,
            "share_definition": "GEMM FLOPs of the captured-graph nodes that composed "
                                "replacements replace / GEMM FLOPs of all captured-graph nodes "
                                "(linear, matmul, mm, bmm, addmm, baddbmm, einsum, SDPA; "
                                "fact.conformance.graph_gemm_flops)",
            "rows": rows, "totals": totals}


STABLE_ROW_KEYS = ("model", "dtype", "precision", "status")
STABLE_COVERAGE_KEYS = ("matches", "composed", "declined", "declined_by_reason", "composed_rules",
                        "gemm_flops", "fact_flops", "share", "matched_share")


def baseline_of(table: dict) -> dict:
    """The table without what varies from machine to machine or run to run (errors, timings,
    paths, full reasons): what corpus/coverage-cpu.json keeps, so that its diff in review is
    the coverage change and nothing else."""
    rows = []
    for row in table["rows"]:
        stable = {k: row[k] for k in STABLE_ROW_KEYS if k in row}
        coverage = row.get("coverage")
        if coverage:
            stable.update({k: _rounded(coverage[k]) for k in STABLE_COVERAGE_KEYS})
        rows.append(stable)
    totals = {k: _rounded(v) for k, v in table["totals"].items()}
    return {"schema": table["schema"], "device": table["device"], "sizes": table["sizes"],
            "share_definition": table["share_definition"], "rows": rows, "totals": totals}


def dump_baseline(doc: dict) -> str:
    """baseline_of's document as JSON text with one line per row, so that a review diff shows
    each changed (model, dtype) as one changed line."""
    head = {k: v for k, v in doc.items() if k not in ("rows", "totals")}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(' "rows": [')
    rows = [f"  {json.dumps(row)}" for row in doc.get("rows", [])]
    lines.append(",\n".join(rows))
    lines.append(" ],")
    lines.append(f' "totals": {json.dumps(doc.get("totals", {}), indent=1)}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def compare(table: dict, baseline: dict) -> dict:
    """The difference of a table against a committed baseline (baseline_of's shape):
    {"broken": rows that were ok and now crash or are wrong, "lost": coverage lost (fewer
    composed, a smaller share, a composed rule gone), "gained": the opposite, "new" / "gone":
    rows only in one of the two}. Each entry is one line of text."""
    current = {row_key(r): r for r in table["rows"]}
    before = {row_key(r): r for r in baseline.get("rows", [])}
    diff: dict[str, list[str]] = {"broken": [], "lost": [], "gained": [], "new": [], "gone": []}
    for key in sorted(set(current) | set(before)):
        now, then = current.get(key), before.get(key)
        if then is None:
            diff["new"].append(f"{key}: {now['status']}")
            continue
        if now is None:
            diff["gone"].append(f"{key}: was {then['status']}")
            continue
        if then.get("status") == "ok" and now["status"] != "ok":
            diff["broken"].append(f"{key}: was ok, now {now['status']}: "
                                  f"{'; '.join(now.get('problems', [])[:1])}")
        coverage = now.get("coverage") or {}
        composed_then, composed_now = then.get("composed", 0), coverage.get("composed", 0)
        share_then, share_now = then.get("share") or 0.0, coverage.get("share") or 0.0
        rules_then, rules_now = set(then.get("composed_rules", [])), set(coverage.get("composed_rules", []))
        what = (f"{key}: composed {composed_then} -> {composed_now}, GEMM-FLOP share "
                f"{share_then:.1%} -> {share_now:.1%}")
        if composed_now < composed_then or share_now < share_then - 5e-4 or rules_then - rules_now:
            gone = sorted(rules_then - rules_now)
            diff["lost"].append(what + (f"; no longer composed: {', '.join(gone)}" if gone else ""))
        elif composed_now > composed_then or share_now > share_then + 5e-4:
            diff["gained"].append(what)
    return diff


def format_table(table: dict) -> str:
    """The coverage table as text: one line per row, then the totals and the reasons."""
    lines = [f"{'model':<34} {'dtype':<8} {'status':<6} {'match':>5} {'comp':>4} {'decl':>4} "
             f"{'GEMM MFLOP':>10} {'FACT share':>10} {'matched':>8} {'err':>8} {'torch err':>9}  declined"]
    for row in table["rows"]:
        c = row.get("coverage") or {}
        reasons = "; ".join(f"{n}x {r[:70]}" for r, n in c.get("declined_by_reason", {}).items())
        fact_err = row.get("fact_rel_err")
        torch_err = row.get("torch_rel_err")
        lines.append(
            f"{row['model']:<34} {row['dtype']:<8} {row['status']:<6} {c.get('matches', '-'):>5} "
            f"{c.get('composed', '-'):>4} {c.get('declined', '-'):>4} "
            f"{c.get('gemm_flops', 0) / 1e6:>10.2f} {_share(c.get('share')):>10} "
            f"{_share(c.get('matched_share')):>8} "
            f"{'-' if fact_err is None else format(fact_err, '.1e'):>8} "
            f"{'-' if torch_err is None else format(torch_err, '.1e'):>9}  {reasons}")
    t = table["totals"]
    lines.append("")
    lines.append(f"{t['rows']} rows: {t['ok']} ok, {t['crash']} crash, {t['wrong']} wrong; "
                 f"{t['matches']} matches, {t['composed']} composed, {t['declined']} declined; "
                 f"{t['rows_with_composition']} rows compose something; GEMM-FLOP share in FACT "
                 f"kernels {_share(t['share'])}")
    for dtype, per in sorted(t["by_dtype"].items()):
        lines.append(f"  {dtype}: {per['rows']} rows, {per['composed']} composed, {per['declined']} "
                     f"declined, FLOP share {_share(per['share'])} (mean over models "
                     f"{_share(per['mean_model_share'])})")
    if t.get("dynamic"):
        lines.append("declared batch range (called at 1, the example's batch, one past it, 2x it): "
                     + ", ".join(f"{n} {state}" for state, n in t["dynamic"].items()))
    lines.append("declined, by reason:")
    for reason, count in t["declined_by_reason"].items():
        lines.append(f"  {count:>4}  {reason}")
    return "\n".join(lines)


def format_diff(diff: dict) -> str:
    titles = {"broken": "BROKEN (was ok)", "lost": "COVERAGE LOST", "gained": "coverage gained",
              "new": "new rows", "gone": "rows gone"}
    lines = []
    for key, title in titles.items():
        if diff.get(key):
            lines.append(f"{title}:")
            lines.extend(f"  {line}" for line in diff[key])
    return "\n".join(lines) if lines else "coverage unchanged against the committed table"


def run_cpu(files: Sequence[Path], work_root: Path, remainder: str = "eager",
            log: Callable[[str], None] = print) -> dict:
    rows = []
    for path in files:
        for dtype_name in file_dtypes(path):
            row = run_cpu_case(path, dtype_name, Path(work_root) / f"{path.stem}-{dtype_name}",
                               remainder=remainder)
            c = row.get("coverage") or {}
            log(f"{path.stem:<34} {dtype_name:<8} {row['status']:<6} composed "
                f"{c.get('composed', '-')}/{c.get('matches', '-')}, share {_share(c.get('share'))}, "
                f"{row['seconds']:.1f} s" + (f"  {row['problems'][0]}" if row["problems"] else ""))
            rows.append(row)
    return make_table(rows)
