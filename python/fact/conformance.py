"""FACT on the conformance corpus (corpus/, issue 9): does it run on models written elsewhere
without a crash or a wrong answer, and how much of each model does it cover?

One generator for both runs:

- CPU (`python -m fact.conformance --cpu`, and tests/python/test_conformance.py in CI): every
  corpus file at its CPU_TEST_SIZES, in each of its DTYPES (float32 in `strict`, bfloat16 in
  `native`): `fact.optimize` on the CPU (replacements run the engine's float64 host reference),
  the composed output against the original run in float64, and the coverage table.
- GPU (`python -m fact.conformance --gpu`, what `fact bench conformance` starts): the corpus
  files at their full sizes on a CUDA GPU: FACT (tuned over a few configurations) against eager
  and torch.compile in the same process, all verified against float64, written as
  `conformance-<device>-<date>.json` (DESIGN.md "Measuring") with a plot and a readable table.
  A prepare phase first runs the cases' compile work in parallel workers, timing nothing, so
  that the serial measurements find it cached (--prepare-jobs; "The prepare phase" below).

The coverage of one (model, dtype) (`coverage_row`):

- `matches`: the replacements the engine's plan lists (planned, declined, pending, failed);
- `composed`: those `fact.optimize` composed (verified against the subgraph they replace);
- `declined`: everything left to PyTorch (`.fact_report.left_to_pytorch`, the module itself
  when nothing was planned), `declined_by_reason` the same grouped by reason with the numbers
  and shapes taken out (`reason_group`);
- `gemm_flops`: the model's matrix-product FLOPs in one forward, counted on the captured graph
  (graph.json, the graph the engine discovers on; `graph_gemm_flops`): linear / matmul / mm /
  bmm / addmm / baddbmm as 2 x (output elements) x K, einsum as 2 x the product of its index
  sizes, scaled_dot_product_attention as its two products 2·B·H·Sq·Sk·(Dqk + Dv) (masks and
  causality not discounted: the same count on both sides of the share). The CPU run
  cross-checks it against a count at the dispatcher (`counted_gemm_flops`: mm / addmm / bmm /
  baddbmm with torch.utils.flop_counter's formulas, SDPA kernels as above), which also stands
  in when no graph was captured;
- `fact_flops`: the GEMM FLOPs of the captured nodes that the composed replacements replaced
  (each replacement's `nodes` in the plan), `matched_flops` the same over every match;
- `share` = fact_flops / gemm_flops: the part of the model's GEMM FLOPs that runs in FACT
  kernels (None for a model without GEMMs); `matched_share` the part discovery matched;
- `plan_fact_flops`: the plan's own `flops` summed over the composed calls of GEMM_KINDS (the
  engine's count of the kernels' work: a causal attention counts half its square), for reference.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import inspect
import io
import json
import logging
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Sequence

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO_ROOT / "corpus"
BASELINE_FILE = CORPUS_DIR / "coverage-cpu.json"
CATEGORIES = ("gemm", "epilogue", "mlp", "attention", "hf", "misc")
DTYPE_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PRECISION_BY_DTYPE = {"float32": "strict", "bfloat16": "native", "float16": "native"}
GEMM_KINDS = ("gemm", "attention")     # plan call kinds whose FLOPs are matrix products
TABLE_SCHEMA = "fact.conformance/1"

# The bound FACT's output error must meet, ‖fact − ref64‖ / ‖ref64‖ with ref64 the original
# module run in float64 on the same weights and inputs. The precision contract (DESIGN.md):
# `strict` is "as accurate as the framework's own float32 path": PyTorch's float32 error on the
# corpus at CPU_TEST_SIZES is at most 3.4e-7, so 1e-5 keeps a margin of ~30x and still fails any
# TF32- or bf16-sized error (1e-4 .. 1e-3). `native` runs the model's dtype with wide
# accumulation: one bf16 rounding is 2^-9 ~ 2e-3 relative, PyTorch's own bf16 error on the corpus
# is at most 4.5e-3 and FACT's the same (it rounds where PyTorch does), so 2e-2 leaves 4x while a
# wrong operand, epilogue step or layout is off by O(1). Where PyTorch's own error is larger than
# the bound (no corpus model at the committed sizes), 1.5x PyTorch's error is the bound instead.
OUTPUT_BOUND = {"strict": 1e-5, "native": 2e-2}
TORCH_ERROR_FACTOR = 1.5


def _first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return (text.splitlines() or [text])[0][:500]


# --------------------------------------------------------------------------------------------
# Corpus files


def corpus_files(directory: Path = CORPUS_DIR) -> list[Path]:
    """The model files: <category>_*.py in the corpus folder, sorted."""
    return sorted(p for p in Path(directory).glob("*.py") if p.name.split("_", 1)[0] in CATEGORIES)


def load_file(path: Path) -> ModuleType:
    """Imports a corpus file by path as a fresh module (sizes can be changed without touching
    other loads)."""
    name = f"fact_conformance_{Path(path).stem}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def file_dtypes(module: ModuleType | Path) -> tuple[str, ...]:
    """The file's DTYPES (a module, or a path to import; a file that does not import gets
    both, so that its rows record the failure instead of vanishing)."""
    if not isinstance(module, ModuleType):
        try:
            module = load_file(module)
        except Exception:  # noqa: BLE001 - reported where the case runs
            return ("float32", "bfloat16")
    return tuple(getattr(module, "DTYPES", ("float32", "bfloat16")))


def _call_get_inputs(module: ModuleType, dtype: torch.dtype, device: str) -> list:
    parameters = inspect.signature(module.get_inputs).parameters
    kwargs = {}
    if "dtype" in parameters:
        kwargs["dtype"] = dtype
    if "device" in parameters:
        kwargs["device"] = device
    out = []
    for x in module.get_inputs(**kwargs):
        if isinstance(x, torch.Tensor):
            x = x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype)
        out.append(x)
    return out


def build(module: ModuleType, dtype_name: str, device: str = "cpu", seed: int = 0,
          sizes: dict | None = None) -> tuple[torch.nn.Module, tuple]:
    """The model (eval mode, in dtype, on device) and its inputs from a fixed seed: built in
    float32 and cast (every dtype gets the same weights), never deep-copied (a forward closing
    over submodules would keep calling the original's). `sizes` are assigned to the module's
    constants first (e.g. CPU_TEST_SIZES)."""
    for key, value in (sizes or {}).items():
        setattr(module, key, value)
    dtype = DTYPE_BY_NAME[dtype_name]
    torch.manual_seed(seed)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
    model = model.to(device=device, dtype=dtype).eval()
    torch.manual_seed(seed + 1)
    inputs = _call_get_inputs(module, torch.float32, device)
    inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in inputs]
    return model, tuple(inputs)


# --------------------------------------------------------------------------------------------
# GEMM FLOPs


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def _einsum_flops(equation: str, shapes: list[list[int]]) -> float:
    """2 x the product of every index's size, for an einsum of two or more operands that sums
    over an index (what the pairwise contraction of two operands costs); 0 for one operand (a
    permutation or a sum) or no summed index (an outer product: torch multiplies)."""
    if len(shapes) < 2:
        return 0.0
    inputs, _, output = equation.replace(" ", "").partition("->")
    inputs = inputs.split(",")
    summed = set("".join(inputs)) - set(output) - {"."}
    if output and not summed:
        return 0.0
    sizes: dict[str, int] = {}
    for letters, shape in zip(inputs, shapes):
        if "..." in letters:
            head, tail = letters.split("...")
            for letter, size in zip(head, shape):
                sizes[letter] = int(size)
            for letter, size in zip(tail[::-1], shape[::-1]):
                sizes[letter] = int(size)
            sizes["..." + str(len(shapes))] = _numel(shape[len(head):len(shape) - len(tail)])
        else:
            for letter, size in zip(letters, shape):
                sizes[letter] = int(size)
    return 2.0 * math.prod(sizes.values())


def graph_gemm_flops(graph_doc: dict) -> dict[str, float]:
    """Matrix-product FLOPs of every node of a captured graph (graph JSON, docs/graph_json.md)
    that does one, by node id: linear / matmul / mm / bmm / addmm / baddbmm as 2 x (output
    elements) x K, einsum as 2 x the product of its index sizes, scaled_dot_product_attention as
    its two products, 2·B·H·Sq·Sk·(Dqk + Dv) (masks and causality not discounted)."""
    shapes = {v["id"]: v.get("shape") for v in graph_doc.get("values", []) if isinstance(v, dict)}

    def tensor(arg: Any) -> list[int] | None:
        return shapes.get(arg.get("tensor")) if isinstance(arg, dict) else None

    flops: dict[str, float] = {}
    for node in graph_doc.get("nodes", []):
        op = str(node.get("target", "")).split(".")
        name = op[1] if len(op) > 1 and op[0] == "aten" else ""
        args = node.get("args", [])
        out = shapes.get((node.get("outputs") or [None])[0])
        try:
            if name in ("linear", "matmul", "mm", "bmm", "addmm", "baddbmm") and out is not None:
                a = tensor(args[1] if name in ("addmm", "baddbmm") else args[0])
                k = a[-1] if a else 0
                flops[node["id"]] = 2.0 * _numel(out) * k
            elif name == "einsum":
                equation = args[0].get("const")
                operands = [shapes.get(t) for t in args[1].get("tensors", [])]
                flops[node["id"]] = _einsum_flops(equation, operands)
            elif name == "scaled_dot_product_attention":
                q, key, v = tensor(args[0]), tensor(args[1]), tensor(args[2])
                flops[node["id"]] = (2.0 * _numel(q[:-2]) * q[-2] * key[-2] * (q[-1] + v[-1]))
        except (TypeError, IndexError, AttributeError, KeyError):
            continue  # a node this count cannot read: left out (counted_gemm_flops cross-checks)
    return flops


def counted_gemm_flops(model: torch.nn.Module, inputs: Sequence[Any]) -> tuple[Any, dict]:
    """(the model's output, its matrix-product FLOPs counted in one forward at the dispatcher):
    {"mm": mm/addmm/mv/dot, "bmm": bmm/baddbmm, "sdpa": scaled-dot-product-attention kernels, "total"}.
    The same counts as graph_gemm_flops, from the ops that run instead of the captured graph: a
    cross-check of it, and the count for a model whose graph was not captured."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    counts = {"mm": 0.0, "bmm": 0.0, "sdpa": 0.0}

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func.overloadpacket
            name = packet.__name__
            if name in ("mm", "addmm", "bmm", "baddbmm"):
                flops = flop_registry[packet](*args, **kwargs, out_val=out)
                counts["bmm" if name in ("bmm", "baddbmm") else "mm"] += float(flops)
            elif name in ("mv", "dot", "vdot"):          # matrix @ vector: 2 x M x K
                counts["mm"] += 2.0 * _numel(args[0].shape)
            elif "scaled_dot_product" in name and "backward" not in name:
                q, k, v = args[0], args[1], args[2]
                counts["sdpa"] += 2.0 * _numel(q.shape[:-2]) * q.shape[-2] * k.shape[-2] * (
                    q.shape[-1] + v.shape[-1])
            return out

    with torch.no_grad(), Counter():
        output = model(*inputs)
    counts["total"] = counts["mm"] + counts["bmm"] + counts["sdpa"]
    return output, counts


# --------------------------------------------------------------------------------------------
# Coverage of one (model, dtype)


_SHAPE = re.compile(r"\[[^\]]*\]|\([^()]*\d[^()]*\)")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?(?![\w.])")
_CALL_LABEL = re.compile(r"\bcall \w+:")


def reason_group(reason: str) -> str:
    """A reason with its shapes, numbers and call labels taken out, so that the same cause on
    different problems groups together: "declined: K=770 not a multiple of 8 for bf16 ..."
    -> "declined: K=N not a multiple of N for bf16 ..."."""
    text = _CALL_LABEL.sub("call:", reason.strip())
    text = _SHAPE.sub("[..]", text)
    text = _NUMBER.sub("N", text)
    text = re.sub(r"\s+", " ", text)
    return text[:160]


def coverage_row(plan_doc: dict | None, graph_doc: dict | None, report: Any,
                 counted: dict | None = None) -> dict:
    """Coverage of one optimize run from its plan (plan.json's document), its captured graph
    (graph.json's; None when there is none: then the model's GEMM FLOPs are `counted`'s and
    nothing is attributed), its FactReport, and optionally the dispatcher's count
    (counted_gemm_flops) to cross-check the graph's."""
    replacements = (plan_doc or {}).get("replacements", []) or []
    composed_ids = {c.id for c in report.composed}
    node_flops = graph_gemm_flops(graph_doc) if graph_doc else {}
    if graph_doc:
        total = sum(node_flops.values())
    else:
        total = float((counted or {}).get("total", 0.0))

    def flops_of(selected: Iterable[dict]) -> float:
        nodes = {n for r in selected for n in r.get("nodes", [])}
        return sum(node_flops.get(n, 0.0) for n in nodes)

    def plan_flops(replacement: dict) -> float:
        return sum(float(call.get("flops") or 0.0) for call in replacement.get("calls", [])
                   if call.get("kind") in GEMM_KINDS)

    composed = [r for r in replacements if r.get("id") in composed_ids]
    fact_flops = flops_of(composed)
    matched_flops = flops_of(replacements)
    declined = [{"what": item.what, "stage": item.stage, "reason": item.reason}
                for item in report.left_to_pytorch]
    by_reason: dict[str, int] = {}
    for item in declined:
        key = reason_group(item["reason"])
        by_reason[key] = by_reason.get(key, 0) + 1
    row = {
        "matches": len(replacements),
        "composed": len(report.composed),
        "declined": len(declined),
        "declined_by_reason": dict(sorted(by_reason.items())),
        "declined_items": declined,
        "composed_rules": sorted(c.rule for c in report.composed),
        "gemm_flops": total,
        "fact_flops": fact_flops,
        "matched_flops": matched_flops,
        "share": (fact_flops / total) if total > 0 else None,
        "matched_share": (matched_flops / total) if total > 0 else None,
        "plan_fact_flops": sum(plan_flops(r) for r in composed),
        "flops_source": "graph" if graph_doc else ("dispatch" if counted else "none"),
    }
    if counted is not None:
        row["counted_gemm_flops"] = float(counted.get("total", 0.0))
    return row


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (inf when out is not finite)."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    if not torch.isfinite(out64).all():
        return math.inf
    denominator = torch.linalg.vector_norm(ref64.flatten()).item()
    difference = torch.linalg.vector_norm((out64 - ref64).flatten()).item()
    return difference / denominator if denominator > 0 else difference


def output_bound(precision: str, torch_error: float | None) -> float:
    """The bound FACT's output error must meet (see OUTPUT_BOUND)."""
    bound = OUTPUT_BOUND.get(precision, OUTPUT_BOUND["native"])
    if torch_error is not None and math.isfinite(torch_error):
        bound = max(bound, TORCH_ERROR_FACTOR * torch_error)
    return bound


def float64_output(model: torch.nn.Module, inputs: Sequence[Any]) -> torch.Tensor:
    """The module run in float64 on the inputs (floating ones converted), its parameters and
    buffers converted in place and restored (fact.measure.float64_in_place)."""
    from fact.measure import float64_in_place

    wide = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in inputs)
    with torch.no_grad(), float64_in_place(model):
        return model(*wide)


def load_json(path: Path) -> dict | None:
    """The JSON document in the file, or None when there is none (or it does not parse)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _single_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    raise TypeError(f"forward returned {type(out).__name__}, not one tensor")


@contextlib.contextmanager
def quiet_torch():
    """Keeps torch's export/dynamo chatter (graph dumps of failed exports, guard errors,
    warnings) out of the output: every failure ends up in a report instead."""
    names = ("torch.fx.experimental.symbolic_shapes", "torch._guards", "torch._dynamo",
             "torch.export", "torch._export")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        for name in names:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def run_cpu_case(path: Path, dtype_name: str, work_dir: Path, remainder: str = "eager",
                 seed: int = 0) -> dict:
    """One (corpus file, dtype) on the CPU at CPU_TEST_SIZES: optimize, compare FACT and
    PyTorch with float64, coverage. Never raises; `status` is "ok", "crash" (something raised:
    fact.optimize, the composed forward) or "wrong" (an output or a replacement outside its
    bound); `problems` says what."""
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
    for row in rows:
        totals[row["status"]] = totals.get(row["status"], 0) + 1
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


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


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


def write_json(path: Path, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)


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


# --------------------------------------------------------------------------------------------
# The GPU benchmark (`fact bench conformance`)

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
    from fact.timing import L2Flusher, time_device

    started = started or time.time()
    precision = PRECISION_BY_DTYPE[dtype_name]
    case: dict = {"name": f"{path.stem}-{dtype_name}", "model": path.stem, "dtype": dtype_name,
                  "precision": precision, "status": "ok", "reason": ""}
    seconds: dict = {}
    case["seconds"] = seconds
    clock = time.perf_counter()
    module = load_file(path)
    model, inputs = build(module, dtype_name, device, seed,
                          getattr(module, "CPU_TEST_SIZES", {}) if sizes == "cpu" else None)
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
    case["config"] = "; ".join(f"{call.summary}: {call.config or call.kernel or c.implementation}"
                               for c in report.composed for call in c.calls)
    case["replacements"] = [{"label": c.label, "rule": c.rule, "rel_err": c.rel_err,
                             "tolerance": c.tolerance} for c in report.composed]
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
    with quiet_torch(), torch.no_grad():
        for name, fn in [*variants.items(), ("fact", composed)]:
            if name in errors:
                continue
            try:
                timing[name] = time_device(lambda fn=fn: fn(*inputs), torch.device(device), warmup,
                                           iters, flusher).to_json()
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


def _geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarize_gpu(cases: Sequence[dict]) -> dict:
    """Geometric-mean speedups against torch.compile (the issue's goals: float32 strict over the
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
                 "torch.compile; bf16 blocks >= 1.15x (issue 9)",
    }


def render_gpu_markdown(doc: dict) -> str:
    """The readable table of a conformance results document."""
    s = doc.get("summary", {})
    v = doc.get("versions", {})
    settings = doc.get("settings", {})
    lines = [f"# FACT conformance benchmark on {doc.get('device', '?')} ({doc.get('date', '?')})", "",
             f"driver {v.get('driver', '?')}, CUDA {v.get('cuda', '?')}, torch {v.get('torch', '?')}, "
             f"CUTLASS {v.get('cutlass', '?')}, fact {v.get('fact', '?')}", "",
             f"Settings: {settings.get('note', '')}", ""]
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


class _Run:
    """The files of one GPU run: the results stem in out_dir; case records, the queue, the
    device description and the logs in work_dir."""

    def __init__(self, out_dir: Path, work_dir: Path, date: str, variant: str):
        self.out_dir, self.work_dir, self.date, self.variant = Path(out_dir), Path(work_dir), date, variant
        self.cases_dir = self.work_dir / "cases"
        self.cases_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def device(self) -> dict:
        return load_json(self.work_dir / "device.json") or {"device": "unknown", "versions": {}}

    def stem(self) -> str:
        return f"{SUITE}-{device_slug(self.device()['device'])}-{self.date}" + (
            f"-{self.variant}" if self.variant else "")

    def record(self, index: int, case: dict) -> None:
        write_json(self.cases_dir / f"{index:03d}-{case['name']}.json", case)

    def cases(self) -> list[dict]:
        return [doc for doc in (load_json(p) for p in sorted(self.cases_dir.glob("*.json"))) if doc]

    def write(self, settings: dict, plot: bool = False) -> Path:
        """Assembles the results file (and its .md; the plot too when asked) from the case
        records so far; returns the JSON's path."""
        device = self.device()
        cases = self.cases()
        doc = {"suite": SUITE, "date": self.date, "device": device["device"],
               "versions": device.get("versions", {}), "settings": settings, "cases": cases,
               "summary": summarize_gpu(cases)}
        path = self.out_dir / f"{self.stem()}.json"
        write_json(path, doc)
        (self.out_dir / f"{self.stem()}.md").write_text(render_gpu_markdown(doc))
        if plot:
            problem = plot_gpu(doc, self.out_dir / f"{self.stem()}.png")
            if problem:
                print(f"plot: {problem}", flush=True)
        return path


def _settings(args: argparse.Namespace, cases: Sequence[tuple[Path, str]]) -> dict:
    subset = "QUICK subset" if args.quick else ("--models " + ",".join(args.models) if args.models
                                               else "whole corpus (QUICK first)")
    sizes = "full-size constants" if args.sizes == "full" else "CPU_TEST_SIZES (smoke test)"
    budget = f", time budget {args.time_budget:.0f} s (cases that would start later are skipped)" \
        if args.time_budget else ""
    prepare = (f"; before the measurements {args.prepare_jobs} parallel workers warmed the kernel "
               f"and Inductor caches (prepare phase, budget "
               f"{f'{args.prepare_budget:.0f} s' if args.prepare_budget else 'unlimited'})"
               if args.prepare_jobs else "")
    return {"tune": args.tune, "sizes": args.sizes, "iters": args.iters, "warmup": args.warmup,
            "flush_mb": args.flush_mb, "time_budget_s": args.time_budget, "device": args.device,
            "prepare_jobs": args.prepare_jobs, "prepare_budget_s": args.prepare_budget,
            "caches": shared_caches(),
            "cases_requested": [f"{p.stem}:{d}" for p, d in cases],
            "note": (f"{len(cases)} cases ({subset}), the files' {sizes}, bf16 in native for every "
                     f"file and float32 in strict for the {'/'.join(STRICT_CATEGORIES)} files; "
                     f"FACT tuned over {args.tune} configuration(s) per kernel (tuning database "
                     f"shared across models), Inductor remainder, never-slower guard on; "
                     f"torch.compile default mode; {args.warmup} warm-up + {args.iters} timed runs, "
                     f"median, L2 flushed ({args.flush_mb} MiB) before each{budget}{prepare}")}


def _worker(args: argparse.Namespace) -> int:
    """Runs the queued cases in order, recording each (ok, wrong or failed) and rewriting the
    results after each; skips those that would start past the deadline."""
    started = args.started or time.time()
    run = _Run(args.out_dir, args.work_dir, args.date, args.variant)
    queue = json.loads(Path(args.queue).read_text())
    settings = json.loads((run.work_dir / "settings.json").read_text())
    if args.device.startswith("cuda"):
        from fact.versions import collect_versions

        index = torch.device(args.device).index or 0
        write_json(run.work_dir / "device.json", {
            "device": torch.cuda.get_device_name(index),
            "versions": collect_versions(torch.device("cuda", index))})
    elif not (run.work_dir / "device.json").is_file():
        from fact.versions import collect_versions

        write_json(run.work_dir / "device.json", {"device": "cpu",
                                                  "versions": collect_versions(torch.device("cpu"))})
    for index, file, dtype_name in queue:
        path = Path(file)
        stem, name = path.stem, f"{path.stem}-{dtype_name}"
        if args.deadline and time.time() > args.deadline:
            run.record(index, with_prepare_record(
                {"name": name, "model": stem, "dtype": dtype_name,
                 "precision": PRECISION_BY_DTYPE[dtype_name], "status": "skipped",
                 "reason": "time budget spent before it started"}, run.work_dir))
            continue
        write_json(run.work_dir / "current.json", {"index": index, "name": name})
        counters_before = cache_counters()
        try:
            case = run_gpu_case(path, dtype_name, run.work_dir / "optimize" / name,
                                device=args.device, sizes=args.sizes, tune=args.tune,
                                warmup=args.warmup, iters=args.iters, flush_mb=args.flush_mb,
                                started=started)
        except Exception as error:  # noqa: BLE001 - recorded, the next case runs
            case = {"name": name, "model": stem, "dtype": dtype_name,
                    "precision": PRECISION_BY_DTYPE[dtype_name], "status": "failed",
                    "reason": _first_line(error), "traceback": traceback.format_exc(limit=-6)}
            _log(f"{name}: FAILED: {case['reason']}", started)
        case["caches"] = cache_activity(counters_before, cache_counters())
        run.record(index, with_prepare_record(case, run.work_dir))
        (run.work_dir / "current.json").unlink(missing_ok=True)
        run.write(settings)
        torch._dynamo.reset()
        gc.collect()
        if args.device.startswith("cuda"):
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as error:  # noqa: BLE001 - a sticky CUDA error: a fresh process goes on
                _log(f"the CUDA context is unusable after {name} ({_first_line(error)}); this "
                     f"worker stops, a fresh one takes the remaining cases", started)
                return WORKER_LOST_EXIT
    return 0


# --------------------------------------------------------------------------------------------
# The prepare phase: the compile caches warmed in parallel before the serial measurements
#
# A case spends most of its minutes in CPU work that needs no quiet GPU: nvcc compiling CUTLASS
# kernels (one process per kernel), torch.export, and Inductor (the composed module's remainder,
# the never-slower guard's torch.compile of the original, the torch.compile baseline). Before
# the serial measurements, --prepare-jobs worker processes run that work for the queued cases,
# in queue order, timing nothing (prepare_gpu_case), so that the measurement of each case finds
# it in the caches the two phases share:
#
# - the FACT kernel cache (<FACT cache root>/kernels: entries keyed by the rendered source and
#   compile command, built under per-key file locks, so concurrent builds are safe). Prepare
#   runs fact.optimize with the measurement's --tune against a scratch copy of the tuning
#   database (scratch_tuning_db): it compiles the same tuning candidates (a kernel space's
#   spread selection is deterministic) or the same stored choices, and its tuning runs on the
#   shared GPU store their choice in the copy only. The measurement then finds every candidate
#   built, times them itself on the quiet GPU and stores its choice in the real database.
# - Inductor's FX graph and AOTAutograd caches and the Triton kernels under
#   TORCHINDUCTOR_CACHE_DIR (share_compile_caches: one folder for every process): torch.compile
#   of the original (the guard and the baseline compile the same graph) is served whole. The
#   composed module's remainder graph carries fact::launch call numbers, which count the calls a
#   process registered so far (fact.ops.register_call): its FX graph misses unless both
#   processes registered the same calls before it, and only its Triton kernels (cached by their
#   source) are reused. Prepare workers do not store Triton launch-configuration benchmarks
#   (autotune_local_cache off: they ran on a shared GPU); the measurement benchmarks and stores.
#
# What the measurement still does itself: torch.export capture, dynamo tracing, Inductor's
# lowering of the remainder, the tuning runs, the verification and the timing. A prepare that
# fails or is stopped costs nothing but its time: the measurement runs the case in full.

PREPARE_DIR = "prepare"              # under the work dir: queue, claims, records, worker logs
PREPARE_BUDGET_SHARE = 0.45          # default --prepare-budget: this share of --time-budget
PREPARE_GPU_MEMORY_SHARE = 0.9       # of the GPU's memory, split evenly over the prepare workers


def available_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_prepare_jobs(device: str) -> int:
    """--prepare-jobs' default: none on the CPU (a smoke test), else half the cores, at most 8
    (each worker's nvcc and Inductor compiles get two cores of a 16-core machine)."""
    if not device.startswith("cuda"):
        return 0
    return max(1, min(8, available_cores() // 2))


def share_compile_caches() -> None:
    """Points Inductor's on-disk caches (FX graphs, AOTAutograd, Triton kernels) at one folder
    for this process and every worker it starts (they inherit the environment): the
    $TORCHINDUCTOR_CACHE_DIR given, else <FACT cache root>/inductor, kept with the kernel cache
    (a later run with the same FACT_CACHE_DIR reuses both). Torch writes its default
    (/tmp/torchinductor_<user>) into the environment on first use: that one counts as not given."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not given or given == default_cache_dir():
        from fact.native import cache_root

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor")


def shared_caches() -> dict:
    """Where the caches both phases use live, and whether Inductor's are on (the results'
    settings)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from fact.native import cache_root

    return {"fact_cache_root": str(cache_root()),
            "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "torch's default"),
            "fx_graph_cache": bool(inductor_config.fx_graph_cache),
            "autograd_cache": bool(functorch_config.enable_autograd_cache)}


def kernel_cache_entries() -> int:
    """The entries (built or failed kernels) in the FACT kernel cache, every process's."""
    from fact.native import cache_root

    try:
        with os.scandir(cache_root() / "kernels") as entries:
            return sum(1 for e in entries if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return 0


def cache_counters() -> dict:
    """This process's Inductor FX graph and AOTAutograd cache hits and misses so far, and the
    kernel cache's entries (kernel_cache_entries)."""
    from torch._dynamo.utils import counters

    return {"fx_graph_hits": counters["inductor"]["fxgraph_cache_hit"],
            "fx_graph_misses": counters["inductor"]["fxgraph_cache_miss"],
            "autograd_hits": counters["aot_autograd"]["autograd_cache_hit"],
            "autograd_misses": counters["aot_autograd"]["autograd_cache_miss"],
            "kernel_cache_entries": kernel_cache_entries()}


def cache_activity(before: dict, after: dict) -> dict:
    """What the caches did between two cache_counters: the FX graph and AOTAutograd hits and
    misses of this process, and `kernels_built`, the kernel cache entries added meanwhile (by
    any process: exact while no other process builds, as in the serial phase)."""
    delta = {key: after[key] - before[key] for key in after}
    delta["kernels_built"] = delta.pop("kernel_cache_entries")
    return delta


def prepare_record_path(work_dir: Path, name: str) -> Path:
    return Path(work_dir) / PREPARE_DIR / f"{name}.json"


def with_prepare_record(case: dict, work_dir: Path) -> dict:
    """The case with what its prepare recorded, when it was prepared: `seconds.prepare` (its
    wall seconds) and, when the prepare failed or was stopped, `prepare_error`."""
    record = load_json(prepare_record_path(work_dir, case["name"]))
    if record is None:
        return case
    case.setdefault("seconds", {})["prepare"] = record.get("seconds")
    if record.get("status") != "ok":
        case["prepare_error"] = record.get("error") or record.get("status")
    return case


def scratch_tuning_db(folder: Path) -> Path:
    """A copy of the tuning database (<FACT cache root>/tuning_db.json, where there is one) in
    `folder`: the prepare's tuning reads the same stored choices as the measurement's and
    stores what it tunes on the shared GPU there, never in the real database."""
    from fact.native import cache_root

    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / "tuning_db.json"
    real = cache_root() / "tuning_db.json"
    if real.is_file():
        shutil.copyfile(real, scratch)
    return scratch


def prepare_gpu_case(path: Path, dtype_name: str, case_dir: Path, *, device: str = "cuda",
                     sizes: str = "full", tune: int = 2, compile_jobs: int = 0,
                     seed: int = 0) -> dict:
    """Warms the caches run_gpu_case reads for one (corpus file, dtype), timing nothing: builds
    the model as run_gpu_case does (same sizes, device and seed); fact.optimize with the same
    `tune` and the Inductor remainder, but without the never-slower guard, against a scratch
    copy of the tuning database (scratch_tuning_db) and with `compile_jobs` parallel kernel
    compiles, in case_dir/plan; runs the composed module once; runs torch.compile of the
    original once (the graph the guard and the baseline compile). Never raises: a step that
    raises is recorded in `errors` and the later steps run where they can. Returns the record:
    name, status ("ok" or "failed" with `error`), seconds (wall), steps (seconds per step),
    what fact.optimize composed, and the cache activity (cache_activity)."""
    from fact.compose import optimize

    precision = PRECISION_BY_DTYPE[dtype_name]
    record: dict = {"name": f"{path.stem}-{dtype_name}", "model": path.stem, "dtype": dtype_name,
                    "precision": precision, "status": "ok", "steps": {}, "errors": {}}
    clock = time.perf_counter()
    before = cache_counters()

    def step(name: str, action: Callable[[], Any]) -> Any:
        begun = time.perf_counter()
        try:
            return action()
        except Exception as error:  # noqa: BLE001 - recorded; the measurement runs the case anyway
            record["errors"][name] = _first_line(error)
            return None
        finally:
            record["steps"][name] = round(time.perf_counter() - begun, 3)

    def build_model():
        module = load_file(path)
        return build(module, dtype_name, device, seed,
                     getattr(module, "CPU_TEST_SIZES", {}) if sizes == "cpu" else None)

    def optimize_model(model, inputs):
        with quiet_torch():
            return optimize(model, inputs, precision, work_dir=case_dir / "plan", tune=tune,
                            remainder="inductor", speed_guard=False,
                            tuning_db=scratch_tuning_db(case_dir), compile_jobs=compile_jobs)

    def run_once(fn, inputs):
        with quiet_torch(), torch.no_grad():
            fn(*inputs)

    built = step("build", build_model)
    if built is not None:
        model, inputs = built
        composed = step("optimize", lambda: optimize_model(model, inputs))
        if composed is not None:
            report = composed.fact_report
            record.update(composed=len(report.composed), runs=report.runs, remainder=report.remainder)
            step("run_composed", lambda: run_once(composed, inputs))
        step("torch_compile", lambda: run_once(torch.compile(model, dynamic=False), inputs))
    record["seconds"] = round(time.perf_counter() - clock, 3)
    record["caches"] = cache_activity(before, cache_counters())
    if record["errors"]:
        record["status"] = "failed"
        record["error"] = "; ".join(f"{name}: {text}" for name, text in record["errors"].items())
    return record


def _claim(prepare_dir: Path, name: str, worker: int) -> bool:
    """Takes a case for this prepare worker: links <name>.claim into place (one of the workers
    that try wins) holding the worker's number, pid and the time."""
    claim = prepare_dir / f"{name}.claim"
    draft = prepare_dir / f".{name}.{os.getpid()}.claim"
    draft.write_text(json.dumps({"worker": worker, "pid": os.getpid(), "at": time.time()}))
    try:
        os.link(draft, claim)
        return True
    except FileExistsError:
        return False
    finally:
        draft.unlink(missing_ok=True)


def _end_with_the_driver() -> None:
    """A prepare worker leads its own process group (_PreparePhase starts it in a new session,
    so that stopping it reaches its nvcc, ninja and Inductor compile processes): on SIGTERM,
    which the kernel also sends when the driver dies (PR_SET_PDEATHSIG, Linux), it kills that
    group, itself included."""
    def end_group(signum, frame):  # noqa: ARG001
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, end_group)
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    except (OSError, AttributeError):
        pass  # not Linux: the driver's stop() still kills the group


def _share_machine(device: str, jobs: int) -> int:
    """Sets this prepare worker's share of the machine, one of `jobs`: Inductor compile
    processes and kernel compiles (returned) of cores / jobs, at most
    PREPARE_GPU_MEMORY_SHARE / jobs of the GPU's memory (the caching allocator raises past it:
    that case's prepare fails, the others go on; the corpus' largest cases need a few GB at full
    size). Triton launch-configuration benchmarks are not stored (autotune_local_cache: they
    ran on a shared GPU)."""
    import torch._inductor.config as inductor_config

    cores = max(1, available_cores() // jobs)
    inductor_config.compile_threads = cores
    inductor_config.autotune_local_cache = False
    if device.startswith("cuda"):
        torch.cuda.set_per_process_memory_fraction(min(1.0, PREPARE_GPU_MEMORY_SHARE / jobs),
                                                   torch.device(device).index or 0)
    return cores


def _release_case_memory(device: str) -> bool:
    """Frees what the last case left (compiled graphs, cached GPU blocks); False when the CUDA
    context is unusable (a fresh process has to go on)."""
    torch._dynamo.reset()
    gc.collect()
    if device.startswith("cuda"):
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - a sticky CUDA error
            return False
    return True


def _prepare_worker(args: argparse.Namespace) -> int:
    """A prepare worker (_PreparePhase starts them): takes the queued cases in order that no
    other worker took, until none is left or the prepare deadline has passed, prepares each
    (prepare_gpu_case) and writes its record. Output goes to its log only; the driver reports
    the records."""
    _end_with_the_driver()
    compile_jobs = _share_machine(args.device, max(1, args.prepare_jobs))
    prepare_dir = Path(args.work_dir) / PREPARE_DIR
    started = args.started or time.time()
    for _index, file, dtype_name in json.loads(Path(args.queue).read_text()):
        if args.prepare_deadline and time.time() >= args.prepare_deadline:
            break
        path = Path(file)
        name = f"{path.stem}-{dtype_name}"
        if not _claim(prepare_dir, name, args.worker_number):
            continue
        print(f"[{time.time() - started:7.1f}s] prepare {name}", flush=True)
        record = prepare_gpu_case(path, dtype_name, prepare_dir / name, device=args.device,
                                  sizes=args.sizes, tune=args.tune, compile_jobs=compile_jobs)
        record["worker"] = args.worker_number
        write_json(prepare_record_path(args.work_dir, name), record)
        print(f"[{time.time() - started:7.1f}s] {name}: {record['status']} in "
              f"{record['seconds']:.1f} s {record.get('error', '')}", flush=True)
        if not _release_case_memory(args.device):
            return WORKER_LOST_EXIT
    return 0


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to the process group a prepare worker leads (itself, its compilers)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _PreparePhase:
    """The prepare workers of one run (see "The prepare phase" above). run() starts
    --prepare-jobs workers over the queued cases, reports each case's record as it appears,
    replaces a worker that died (the case it was on gets a failed record), and ends when the
    workers have taken every case or at the deadline, where it kills those still working (their
    cases get "stopped" records). interrupt() kills them at once (SIGTERM/SIGINT of the run)."""

    POLL_S = 0.5

    def __init__(self, run: _Run, pending: Sequence[tuple[int, str, str]],
                 args: argparse.Namespace, started: float, deadline: float):
        self.folder = run.work_dir / PREPARE_DIR
        self.pending = list(pending)
        self.names = {f"{Path(f).stem}-{d}": (Path(f).stem, d) for _, f, d in self.pending}
        self.args, self.started, self.deadline = args, started, deadline
        self.workers: dict[int, subprocess.Popen] = {}
        self.stop_reason = "the prepare budget ran out during it"
        self.reported: set[str] = set()
        self.began = self.ended = 0.0
        self.compile_jobs = max(1, available_cores() // max(1, args.prepare_jobs))

    def run(self) -> None:
        self.began = time.time()
        shutil.rmtree(self.folder, ignore_errors=True)  # claims of an earlier run would hold cases
        self.folder.mkdir(parents=True)
        (self.folder / "queue.json").write_text(json.dumps(self.pending))
        count = min(self.args.prepare_jobs, len(self.pending))
        budget = f"until {self.deadline - self.started:.0f} s" if self.deadline else "no time limit"
        _log(f"prepare: {count} workers over {len(self.pending)} cases ({budget}; "
             f"{self.compile_jobs} cores each)", self.started)
        try:
            for _ in range(count):
                self._start_worker()
            while self.workers:
                self._report_records()
                self._reap_workers()
                if self.deadline and time.time() >= self.deadline and self.workers:
                    _log(f"prepare: budget spent, stopping {len(self.workers)} workers", self.started)
                    break
                time.sleep(self.POLL_S)
        finally:
            self._stop_workers()
            self._report_records()
            self.ended = time.time()
        summary = self.summary()
        _log(f"prepare: {summary['prepared']} of {len(self.pending)} cases prepared "
             f"({summary['failed']} failed, {summary['stopped']} stopped, "
             f"{summary['not_started']} not started) in {summary['wall_s']:.0f} s", self.started)

    def interrupt(self) -> None:
        """Kills every worker now (from a signal handler: sends signals, waits for nothing)."""
        self.stop_reason = "the run was stopped during it"
        for process in list(self.workers.values()):
            _kill_group(process)

    def summary(self) -> dict:
        """For the results' settings: the workers, the budget, and how many cases were
        prepared, failed, stopped or not started."""
        statuses = [(load_json(prepare_record_path(self.folder.parent, name)) or {}).get("status")
                    for name in self.names]
        return {"jobs": self.args.prepare_jobs, "budget_s": self.args.prepare_budget,
                "compile_jobs_per_worker": self.compile_jobs,
                "wall_s": round((self.ended or time.time()) - self.began, 1),
                "prepared": statuses.count("ok"), "failed": statuses.count("failed"),
                "stopped": statuses.count("stopped"), "not_started": statuses.count(None)}

    def _start_worker(self) -> None:
        number = max(self.workers, default=0) + 1
        while (self.folder / f"worker-{number}.log").exists():
            number += 1
        argv = [sys.executable, "-m", "fact.conformance", "--prepare-worker",
                "--queue", str(self.folder / "queue.json"), "--started", str(self.started),
                "--prepare-deadline", str(self.deadline), "--worker-number", str(number),
                *self.args.passed, "--prepare-jobs", str(self.args.prepare_jobs)]
        with open(self.folder / f"worker-{number}.log", "w") as log:
            self.workers[number] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def _reap_workers(self) -> None:
        """Settles the workers that exited: the case a dead one was on gets a failed record; a
        fresh worker replaces one that stopped early while cases are left, unless it took
        none (it would fail again)."""
        for number, process in list(self.workers.items()):
            status = process.poll()
            if status is None:
                continue
            del self.workers[number]
            if status == 0:
                continue
            self._settle_claims(number, "failed", f"the prepare worker died during it (exit {status})")
            took_a_case = any(claim.get("worker") == number for claim in self._claims().values())
            if not took_a_case:
                _log(f"prepare worker {number} exited ({status}) before taking a case; see "
                     f"{self.folder / f'worker-{number}.log'}", self.started)
            elif self._unclaimed() and not (self.deadline and time.time() >= self.deadline):
                self._start_worker()

    def _stop_workers(self) -> None:
        for process in self.workers.values():
            _kill_group(process)
        for number, process in self.workers.items():
            process.wait()
            self._settle_claims(number, "stopped", self.stop_reason)
        self.workers.clear()

    def _claims(self) -> dict[str, dict]:
        return {name: load_json(self.folder / f"{name}.claim") or {} for name in self.names
                if (self.folder / f"{name}.claim").is_file()}

    def _unclaimed(self) -> list[str]:
        return [name for name in self.names if not (self.folder / f"{name}.claim").exists()]

    def _settle_claims(self, number: int, status: str, reason: str) -> None:
        """Records the cases worker `number` took and left without a record."""
        log = self.folder / f"worker-{number}.log"
        for name, claim in self._claims().items():
            path = prepare_record_path(self.folder.parent, name)
            if claim.get("worker") != number or path.exists():
                continue
            stem, dtype_name = self.names[name]
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
            write_json(path, {"name": name, "model": stem, "dtype": dtype_name, "status": status,
                              "error": reason, "worker": number,
                              "seconds": round(time.time() - claim.get("at", time.time()), 3),
                              "log_tail": tail})

    def _report_records(self) -> None:
        """A progress line for each record that appeared since the last call."""
        for name in self.names:
            if name in self.reported:
                continue
            record = load_json(prepare_record_path(self.folder.parent, name))
            if record is None:
                continue
            self.reported.add(name)
            seconds, worker = record.get("seconds") or 0.0, record.get("worker")
            if record.get("status") == "ok":
                steps = record.get("steps", {})
                _log(f"prepared {name} in {seconds:.1f} s (worker {worker}: optimize "
                     f"{steps.get('optimize', 0):.1f} s, torch.compile "
                     f"{steps.get('torch_compile', 0):.1f} s; {record.get('composed', 0)} composed)",
                     self.started)
            else:
                _log(f"prepare {name}: {record.get('status', '?').upper()} after {seconds:.1f} s "
                     f"(worker {worker}): {record.get('error', '')}", self.started)


def _prepare_deadline(args: argparse.Namespace, started: float, deadline: float) -> float:
    """When the prepare phase ends at the latest (0: no limit): --prepare-budget seconds after
    the start, never after the run's own deadline."""
    if not args.prepare_budget:
        return deadline
    end = started + args.prepare_budget
    return min(end, deadline) if deadline else end


def run_gpu(args: argparse.Namespace) -> int:
    """The driver: with --prepare-jobs, first the prepare phase (_PreparePhase: the cases'
    compile work in parallel workers, until --prepare-budget); then the measurements in worker
    processes (one, unless a case takes its process down: the case is recorded as failed with
    the worker's last output and a fresh worker takes the rest); then writes the results file,
    its table and its plot. SIGTERM/SIGINT stop whichever phase runs and keep what was measured."""
    started = time.time()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("fact.conformance --gpu: no CUDA GPU here (run it on a Hopper GPU; --device cpu "
              "--sizes cpu is a smoke test of the runner)", file=sys.stderr)
        return 2
    share_compile_caches()
    files = [Path(f) for f in args.files] or corpus_files(args.corpus)
    cases = gpu_cases(files, args.models, args.quick, args.dtypes)
    run = _Run(args.out_dir, args.work_dir, args.date, args.variant)
    settings = _settings(args, cases)
    write_json(run.work_dir / "settings.json", settings)
    deadline = started + args.time_budget if args.time_budget else 0.0
    pending = [(i, str(p), d) for i, (p, d) in enumerate(cases)]
    _log(f"{len(pending)} cases: {', '.join(f'{Path(f).stem}:{d}' for _, f, d in pending)}", started)
    prepare = None
    if args.prepare_jobs > 0 and pending:
        prepare = _PreparePhase(run, pending, args, started, _prepare_deadline(args, started, deadline))
        if not settings["caches"]["fx_graph_cache"]:
            _log("Inductor's FX graph cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE): the prepare "
                 "phase warms the kernel and Triton caches only", started)
    child: list = [None]
    stopping = [False]

    def stop(signum, frame):  # noqa: ARG001 - SIGTERM/SIGINT: stop the workers, keep the results
        if stopping[0]:
            return  # already stopping: let the first stop finish writing the results
        stopping[0] = True
        if prepare is not None:
            prepare.interrupt()
        if child[0] is not None and child[0].poll() is None:
            child[0].terminate()
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}

    try:
        if prepare is not None:
            try:
                prepare.run()
            finally:
                settings["prepare"] = prepare.summary()
                write_json(run.work_dir / "settings.json", settings)
        while pending:
            queue = run.work_dir / "queue.json"
            queue.write_text(json.dumps(pending))
            (run.work_dir / "current.json").unlink(missing_ok=True)
            log_path = run.work_dir / f"worker-{pending[0][0]:03d}.log"
            argv = [sys.executable, "-m", "fact.conformance", "--worker", "--queue", str(queue),
                    "--started", str(started), "--deadline", str(deadline), *args.passed]
            with open(log_path, "w") as log:
                child[0] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for line in child[0].stdout:
                    log.write(line)
                    log.flush()
                    if line.startswith("[") or line.startswith("plot:"):
                        print(line, end="", flush=True)
                status = child[0].wait()
            done = {p.name.split("-", 1)[0] for p in run.cases_dir.glob("*.json")}
            current = load_json(run.work_dir / "current.json")
            if current is not None and f"{current['index']:03d}" not in done:
                tail = log_path.read_text().splitlines()[-15:]
                index = current["index"]
                stem, dtype_name = next((Path(f).stem, d) for i, f, d in pending if i == index)
                run.record(index, with_prepare_record(
                    {"name": current["name"], "model": stem, "dtype": dtype_name,
                     "precision": PRECISION_BY_DTYPE[dtype_name], "status": "failed",
                     "reason": f"the worker process died during it (exit {status})",
                     "log_tail": tail}, run.work_dir))
                _log(f"{current['name']}: FAILED: the worker died (exit {status})", started)
                done.add(f"{index:03d}")
            remaining = [c for c in pending if f"{c[0]:03d}" not in done]
            if len(remaining) == len(pending):
                _log(f"the worker made no progress (exit {status}); stopping", started)
                break
            pending = remaining
    except KeyboardInterrupt:
        _log("stopped: writing what was measured", started)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not load_json(run.work_dir / "device.json"):
        write_json(run.work_dir / "device.json", {"device": args.device, "versions": {}})
    path = run.write(settings, plot=True)
    doc = load_json(path) or {}
    print("\n" + render_gpu_markdown(doc), flush=True)
    print(f"results: {path}\ntable: {path.with_suffix('.md')}\nplot: {path.with_suffix('.png')}", flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m fact.conformance",
        description="FACT on the conformance corpus: the CPU run at CPU_TEST_SIZES and its "
                    "coverage table (default, --cpu), or the GPU benchmark at full size (--gpu, "
                    "what `fact bench conformance` runs).")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="the CPU run (default)")
    mode.add_argument("--gpu", action="store_true", help="the GPU benchmark")
    mode.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    mode.add_argument("--prepare-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*", type=Path, help="corpus files (default: all)")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="plans, graphs, case records and logs (default: a fresh temporary folder)")
    cpu = parser.add_argument_group("CPU run")
    cpu.add_argument("--json", type=Path, default=None,
                     help="write the coverage table here (default $FACT_CONFORMANCE_OUT or "
                          "out/conformance/coverage.json)")
    cpu.add_argument("--baseline", type=Path, default=BASELINE_FILE,
                     help="the committed table to compare with (default corpus/coverage-cpu.json)")
    cpu.add_argument("--write-baseline", action="store_true",
                     help="(re)write the committed table from this run")
    cpu.add_argument("--remainder", default="eager", choices=("eager", "inductor"))
    gpu = parser.add_argument_group("GPU benchmark")
    gpu.add_argument("-o", "--out-dir", type=Path, default=REPO_ROOT / "bench" / "results",
                     help="results folder (default bench/results)")
    gpu.add_argument("--models", type=lambda s: [m for m in s.split(",") if m], default=None,
                     help="comma-separated stems or stem:dtype (default: all cases)")
    gpu.add_argument("--quick", action="store_true", help="the QUICK subset only")
    gpu.add_argument("--dtypes", type=lambda s: s.split(","), default=None,
                     help="comma-separated: bfloat16,float32")
    gpu.add_argument("--tune", type=int, default=2, help="configurations tuned per kernel (default 2)")
    gpu.add_argument("--time-budget", type=float, default=0.0,
                     help="seconds; cases that would start later are skipped (default: no limit)")
    gpu.add_argument("--prepare-jobs", type=int, default=None, metavar="N",
                     help="worker processes of the prepare phase, which runs each case's "
                          "fact.optimize and torch.compile in parallel before the serial "
                          "measurements, timing nothing, so that those find the kernels (nvcc) and "
                          "Inductor's compiled graphs cached; 0: no prepare phase (default: "
                          "min(8, cores/2) on a GPU, 0 with --device cpu)")
    gpu.add_argument("--prepare-budget", type=float, default=None, metavar="SECONDS",
                     help="seconds from the start that the prepare phase may take: no case starts "
                          "after, the workers still running are stopped, the measurements go on "
                          f"with what is left (default {PREPARE_BUDGET_SHARE * 100:.0f}%% of --time-budget; "
                          "no limit without one). It compiles what the measurement compiles, with "
                          "the same --tune (tuning candidates included, timed on the shared GPU into "
                          "a scratch tuning database: the measurement times them again and stores its "
                          "choice); the composed module's Inductor remainder reuses only its Triton "
                          "kernels (see the module's notes on the prepare phase)")
    gpu.add_argument("--iters", type=int, default=30)
    gpu.add_argument("--warmup", type=int, default=5)
    gpu.add_argument("--flush-mb", type=int, default=256)
    gpu.add_argument("--sizes", choices=("full", "cpu"), default="full",
                     help="full: the files' own constants; cpu: CPU_TEST_SIZES (smoke test)")
    gpu.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test)")
    gpu.add_argument("--variant", default="", help="suffix of the results file name")
    gpu.add_argument("--summarize", type=Path, default=None, metavar="RESULTS_JSON",
                     help="print the short table of a results file and exit")
    gpu.add_argument("--date", default=time.strftime("%Y-%m-%d", time.gmtime()), help=argparse.SUPPRESS)
    gpu.add_argument("--queue", default=None, help=argparse.SUPPRESS)
    gpu.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    gpu.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    gpu.add_argument("--prepare-deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    gpu.add_argument("--worker-number", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prepare_jobs is None:
        args.prepare_jobs = default_prepare_jobs(args.device)
    if args.prepare_budget is None:
        args.prepare_budget = PREPARE_BUDGET_SHARE * args.time_budget

    if args.summarize:
        print(short_table(json.loads(args.summarize.read_text())))
        return 0
    if args.gpu or args.worker or args.prepare_worker:
        args.work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="fact_conformance_gpu_"))
        if args.gpu:
            # what the workers get: this command line without the mode, with the resolved
            # folders and date
            args.passed = [a for a in argv if a != "--gpu"] + [
                "--work-dir", str(args.work_dir), "--out-dir", str(args.out_dir), "--date", args.date]
            return run_gpu(args)
        return _prepare_worker(args) if args.prepare_worker else _worker(args)

    files = [Path(f) for f in args.files] or corpus_files(args.corpus)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="fact_conformance_"))
    table = run_cpu(files, work, remainder=args.remainder)
    out = args.json or Path(os.environ.get("FACT_CONFORMANCE_OUT", "out/conformance/coverage.json"))
    write_json(out, table)
    print("\n" + format_table(table))
    if args.baseline.is_file() and not args.write_baseline:
        print("\n" + format_diff(compare(table, json.loads(args.baseline.read_text()))))
    if args.write_baseline:
        args.baseline.write_text(dump_baseline(baseline_of(table)))
        print(f"\nwrote {args.baseline}")
    print(f"\nwrote {out}")
    return 0 if table["totals"]["crash"] == 0 and table["totals"]["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
