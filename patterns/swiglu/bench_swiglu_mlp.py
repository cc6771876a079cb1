#!/usr/bin/env python3
"""The SwiGLU MLP alone on the GPU (the Llama-3-8B MLP: 8192 tokens x 4096 -> 14336 -> 4096, bf16):
FACT against torch.compile of the MLP and eager, in one process, on the same inputs.

  fact           fact.optimize(mlp, precision="native"): the gate and up projections as ONE
                 GEMM over their weights interleaved at plan time with the glu(silu) epilogue,
                 then the down GEMM (each replacement checked by apply_plan against the
                 subgraph it replaces); speed_guard off, so the composed module itself is timed
  torch_compile  torch.compile(mlp) (cuBLAS GEMMs + Inductor's fused silu * up)
  torch_eager    the MLP as written
Every variant is verified against the MLP run in float64 on fresh inputs (‖out − ref‖ / ‖ref‖).
Timing: fact.timing.time_cuda (CUDA events, warm-up, L2 flushed before each run, median and
p10-p90).

Writes <out-dir>/swiglu-<device>-<date>.json in the results shape (suite "swiglu") and
prints one summary line last. --wait-for FILE: before timing, wait (up to 300 s) until FILE
exists (a GPU test running beside this script must not share the GPU with the timed runs).

Usage: PYTHONPATH=python python3 patterns/swiglu/bench_swiglu_mlp.py [--out-dir DIR]
           [--tokens 8192] [--hidden 4096] [--intermediate 14336] [--tune N] [--iters N]
           [--wait-for FILE] [--device cuda|cpu]
(--device cpu runs the same steps with the host reference, for a smoke test at small sizes.)
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench" / "models"))

import fact  # noqa: E402
from fact.measure import _relative_error, float64_in_place  # noqa: E402
from fact.timing import L2Flusher, time_device  # noqa: E402
from fact.versions import collect_versions  # noqa: E402
from llama_block import LlamaMLP  # noqa: E402


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def float64_reference(mlp: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), float64_in_place(mlp):
        return mlp(x.double())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("bench/results"))
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=14336)
    parser.add_argument("--tune", type=int, default=0, help="tune each kernel over at most N configurations")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--wait-for", type=Path, default=None)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--device", default="cuda", help="cuda (the benchmark); cpu for a smoke run at small sizes")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    started = time.time()
    torch.manual_seed(0)
    mlp = LlamaMLP(args.hidden, args.intermediate).to(device=device, dtype=torch.bfloat16).eval()
    with torch.no_grad():  # Llama-like weight scale: outputs of order one
        for linear in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            linear.weight.normal_(0.0, linear.weight.shape[1] ** -0.5)
    x = torch.randn(args.tokens, args.hidden, device=device, dtype=torch.bfloat16)
    case = {"name": f"swiglu_mlp_{args.tokens}x{args.hidden}x{args.intermediate}_bf16",
            "precision": "native", "baselines": {}, "speedup": {}}
    timings = {}

    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="fact-swiglu-"))
    t0 = time.time()
    composed = fact.optimize(mlp, (x,), precision="native", work_dir=work_dir, remainder="eager",
                             tune=args.tune, speed_guard=False)
    report = composed.fact_report
    case["fact_optimize_s"] = round(time.time() - t0, 1)
    case["composed"] = [{"rule": r.rule, "calls": [c.summary for c in r.calls],
                         "configs": [c.config for c in r.calls], "derived": r.derived,
                         "verified": r.verified, "rel_err": r.rel_err} for r in report.composed]
    case["left_to_pytorch"] = [f"{left.what}: {left.reason}" for left in report.left_to_pytorch]
    case["config"] = "; ".join(c.config for r in report.composed for c in r.calls)
    glu_calls = [c for r in report.composed for c in r.calls if "glu" in c.summary]
    if not glu_calls:
        print("warning: no glu GEMM in the plan:", report, file=sys.stderr)

    t0 = time.time()
    compiled = torch.compile(mlp)
    with torch.no_grad():
        compiled(x)
    case["torch_compile_s"] = round(time.time() - t0, 1)

    # Verified against float64 on fresh inputs (not the ones the plan was made with).
    generator = torch.Generator(device="cpu").manual_seed(2026)
    fresh = torch.randn(x.shape, generator=generator).to(device=device, dtype=torch.bfloat16)
    reference = float64_reference(mlp, fresh)
    variants = {"fact": composed, "torch_compile": compiled, "torch_eager": mlp}
    errors = {}
    with torch.no_grad():
        for name, fn in variants.items():
            errors[name] = _relative_error(fn(fresh), reference)
    del reference
    if device.type == "cuda":
        torch.cuda.empty_cache()

    if args.wait_for is not None:
        deadline = time.time() + 300
        while not args.wait_for.exists() and time.time() < deadline:
            time.sleep(0.5)
    flusher = L2Flusher(256, device) if device.type == "cuda" else None
    with torch.no_grad():
        for name, fn in variants.items():
            timings[name] = time_device(lambda: fn(x), device, warmup=5, iters=args.iters, flusher=flusher)

    flops = 2.0 * args.tokens * args.hidden * args.intermediate * 3
    case["fact_ms"] = timings["fact"].median_ms
    case["rel_err"] = errors["fact"]
    case["fact_timing"] = timings["fact"].to_json()
    case["fact_tflops"] = flops / (timings["fact"].median_ms * 1e-3) / 1e12
    for name in ("torch_eager", "torch_compile"):
        case["baselines"][name] = {"ms": timings[name].median_ms, "rel_err": errors[name],
                                   "timing": timings[name].to_json()}
        case["speedup"][name] = timings[name].median_ms / timings["fact"].median_ms
    case["wall_s"] = round(time.time() - started, 1)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    date = datetime.date.today().isoformat()
    doc = {"suite": "swiglu", "date": date, "device": name, "versions": collect_versions(device),
           "cases": [case]}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"swiglu-{slug(name)}-{date}.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"swiglu mlp {args.tokens}x{args.hidden}->{args.intermediate}->{args.hidden} bf16 on {name}: "
          f"fact {case['fact_ms']:.3f} ms (rel_err {errors['fact']:.2e}, {case['fact_tflops']:.0f} TFLOP/s, "
          f"glu GEMM {'yes' if glu_calls else 'NO'}), torch.compile {timings['torch_compile'].median_ms:.3f} ms "
          f"({case['speedup']['torch_compile']:.3f}x), eager {timings['torch_eager'].median_ms:.3f} ms "
          f"({case['speedup']['torch_eager']:.3f}x); {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the summary line says what failed
        traceback.print_exc()
        print("swiglu mlp benchmark failed (traceback above)")
        sys.exit(1)
