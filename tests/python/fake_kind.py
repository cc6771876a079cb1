"""Test support: a made-up problem kind ("axpby", tests/python/data/fake_kind.c) and plans
(docs/plan.md, schema fact.plan/2) for it, written here the way the engine writes them, so
composition can be tested without a GPU and without the engine.

    axpby:       y = a*x + b*z  (and w = x*z when a second result is asked for)
    axpby_half:  the same, writing only the first half (a broken kernel)

The argument struct is packed with `struct` here, in the test, as a pattern folder would;
python/fact never sees inside it.
"""
from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
C_COMPILER = shutil.which("cc") or shutil.which("gcc")
ABI_VERSION = 2

# FactCallHeader, n, dtype, reserved, a, b, then (pointer, stride) for x, z, y, w
AXPBY_FORMAT = "<IIIIqiiddQqQqQqQq"
AXPBY_SIZE = struct.calcsize(AXPBY_FORMAT)  # 112
OFFSET_X, OFFSET_Z, OFFSET_Y, OFFSET_W = 48, 64, 80, 96
DTYPE_CODES = {"torch.float32": 0, "torch.float64": 1}


def kind_id(name: str) -> int:
    """fact_kind_id: FNV-1a (32 bit) of the kind's name."""
    value = 2166136261
    for byte in name.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def build_library(folder: Path, source: Path = DATA / "fake_kind.c") -> Path:
    """Compiles the fake kind's library with the system C compiler into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"lib{source.stem}.so"
    subprocess.run([C_COMPILER, "-O1", "-shared", "-fPIC", "-I", str(REPO_ROOT / "include"),
                    str(source), "-o", str(path)], check=True)
    return path


def contiguous_stride(shape) -> list[int]:
    stride, running = [], 1
    for size in reversed(list(shape)):
        stride.append(running)
        running *= max(int(size), 1)
    return list(reversed(stride))


def axpby_image(n: int, a: float, b: float, dtype: str = "torch.float32",
                kind: str = "axpby") -> bytes:
    return struct.pack(AXPBY_FORMAT, ABI_VERSION, kind_id(kind), AXPBY_SIZE, 0, n,
                       DTYPE_CODES[dtype], 0, a, b, 0, 1, 0, 1, 0, 1, 0, 1)


def axpby_call(label: str, x: str, z: str, y: str, shape, a: float, b: float, *,
               dtype: str = "torch.float32", w: str | None = None, kind: str = "axpby",
               tolerance: float = 1e-6, kernel: str | None = None,
               operand_dtype: str | None = None, result_shape=None) -> dict:
    """A plan call computing y = a*x + b*z (and w = x*z) over dense tensors of `shape`."""
    n = math.prod(shape)
    result_shape = list(result_shape if result_shape is not None else shape)
    pointers = [{"offset": OFFSET_X, "from": "operand", "index": 0, "element_offset": 0},
                {"offset": OFFSET_Z, "from": "operand", "index": 1, "element_offset": 0},
                {"offset": OFFSET_Y, "from": "result", "index": 0, "element_offset": 0}]
    results = [{"value": y, "shape": result_shape, "stride": contiguous_stride(result_shape),
                "dtype": dtype}]
    if w is not None:
        pointers.append({"offset": OFFSET_W, "from": "result", "index": 1, "element_offset": 0})
        results.append({"value": w, "shape": list(shape), "stride": contiguous_stride(shape),
                        "dtype": dtype})
    image = axpby_image(n, a, b, dtype, kind)
    return {
        "kind": kind, "label": label,
        "summary": f"{kind} {n} a={a} b={b}",
        "problem": {"n": n, "a": a, "b": b},
        "kernel": kernel, "config": "host", "config_source": "default",
        "tuning_key": f"{kind}|{n}", "tolerance": tolerance,
        "flops": 3.0 * n, "min_bytes": 12.0 * n,
        "operands": [{"value": x, "dtype": operand_dtype or dtype}, {"value": z, "dtype": dtype}],
        "results": results,
        "args": {"size": len(image), "hex": image.hex(), "pointers": pointers},
    }


def replacement(rid: int, nodes: list[str], inputs: list, outputs: list[str], calls: list[dict],
                *, rule: str = "axpby_rule", pattern: str = "axpby", status: str = "planned",
                reason: str = "", label: str | None = None) -> dict:
    """A plan replacement; `inputs` are value ids (activations) or dicts."""
    return {
        "id": rid, "label": label or str(rid), "rule": rule, "pattern": pattern,
        "status": status, "reason": reason, "classification": "NEW", "nodes": list(nodes),
        "inputs": [i if isinstance(i, dict) else {"value": i, "kind": "activation"} for i in inputs],
        "outputs": list(outputs), "est_before_us": 2.0, "est_after_us": 1.0, "calls": calls,
    }


def input_specs(*inputs) -> list[dict]:
    return [{"shape": list(t.shape), "dtype": str(t.dtype)} for t in inputs]


def write_plan(folder: Path, inputs, replacements: list[dict], *, precision: str = "strict",
               device: str = "cpu", kernels: dict | None = None, status: str = "planned",
               reason: str = "", patterns=None) -> Path:
    """Writes <folder>/plan.json; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"schema": "fact.plan/2", "abi_version": ABI_VERSION, "precision": precision,
           "device": device, "inputs": input_specs(*inputs), "status": status, "reason": reason,
           "capture": "torch.export", "patterns": patterns, "kernels": kernels or {},
           "replacements": replacements, "notes": ["written by tests/python/fake_kind.py"]}
    (folder / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")
    return folder


def node_names(module: torch.nn.Module, inputs) -> list[str]:
    """The call_function node names of the module's exported graph (what plans name)."""
    graph = torch.export.export(module, tuple(inputs), strict=False).graph
    return [n.name for n in graph.nodes if n.op == "call_function"]


# --------------------------------------------------------------------------------------------
# Plans over declared symbols (docs/dynamic_shapes.md), written as the engine writes them


def poly(*terms) -> list:
    """[[coefficient, [exponents]], ...] from (coefficient, exponent, exponent, ...) tuples."""
    return [[term[0], list(term[1:])] for term in terms]


def size(expr: str, *terms) -> dict:
    return {"expr": expr, "poly": poly(*terms)}


def symbolic_axpby_call(label: str, x: str, z: str, y: str, width: int, a: float, b: float, *,
                        edges=(1, 2, 4, 8), bucket_a: dict | None = None,
                        z_rows: int = 1, dtype: str = "torch.float32",
                        tolerance: float = 1e-6) -> dict:
    """An axpby call over one symbol `batch`: x and y are [batch, width], z is [z_rows*batch,
    width] and the call reads its last batch rows (a polynomial element offset); n = width*batch
    is patched into the image (8 bytes at offset 16). `bucket_a`: bucket index -> the `a` its
    image carries (so a test sees which bucket ran)."""
    rows = size("batch", (1, 1))
    shape = [rows, width]
    stride = [width, 1]
    z_shape = [size(f"{z_rows}*batch", (z_rows, 1)) if z_rows != 1 else rows, width]
    pointers = [{"offset": OFFSET_X, "from": "operand", "index": 0, "element_offset": 0},
                {"offset": OFFSET_Z, "from": "operand", "index": 1,
                 "element_offset": size(f"{width * (z_rows - 1)}*batch", (width * (z_rows - 1), 1))
                 if z_rows != 1 else 0},
                {"offset": OFFSET_Y, "from": "result", "index": 0, "element_offset": 0}]
    image = axpby_image(width * max(edges[0], 1), a, b, dtype)
    buckets = []
    for index in range(len(edges)):
        entry = {"kernel": None, "config": "host"}
        if bucket_a and index in bucket_a:
            entry["hex"] = axpby_image(width * max(edges[0], 1), bucket_a[index], b, dtype).hex()
        buckets.append(entry)
    return {
        "kind": "axpby", "label": label, "summary": f"axpby {width}*batch a={a} b={b}",
        "kernel": None, "config": "host", "config_source": "default", "tolerance": tolerance,
        "operands": [{"value": x, "dtype": dtype, "shape": shape, "stride": stride},
                     {"value": z, "dtype": dtype, "shape": z_shape, "stride": stride}],
        "results": [{"value": y, "shape": shape, "stride": stride, "dtype": dtype}],
        "args": {"size": len(image), "hex": image.hex(), "pointers": pointers,
                 "patches": [{"offset": 16, "bytes": 8, "expr": f"{width}*batch",
                              "poly": poly((width, 1))}]},
        "buckets": buckets,
    }


def batch_symbol(low: int = 1, high: int = 8, hint: int = 2, edges=(1, 2, 4, 8), multiple: int = 1) -> dict:
    return {"name": "batch", "min": low, "max": high, "hint": hint, "multiple": multiple,
            "edges": list(edges)}
