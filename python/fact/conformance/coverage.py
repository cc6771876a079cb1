"""The coverage of one (model, dtype) (`coverage_row`, defined in the package docstring): the
GEMM FLOPs of a captured graph (`graph_gemm_flops`) and at the dispatcher
(`counted_gemm_flops`), the replacements composed and declined, and the declines grouped by
reason (`reason_group`). Shared by the CPU run and the GPU benchmark."""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence

import torch


GEMM_KINDS = ("gemm", "attention")     # plan call kinds whose FLOPs are matrix products


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


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
