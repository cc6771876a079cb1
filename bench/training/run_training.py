#!/usr/bin/env python3
"""Training steps through FACT: one model per case composed for training (`fact.optimize` of
the module in train mode: AOTAutograd's forward and backward graphs, docs/compose.md
"Training"), against the original eagerly and `torch.compile` of it, each with its own AdamW.

Per case:
- step time (zero_grad, forward, loss, backward, optimizer step) of FACT, eager and
  torch.compile, timed interleaved round by round with CUDA events (medians; no L2 flush: a
  step's own traffic is far larger than the L2), and the ratios;
- parameter gradients of FACT's first step against float64 autograd of the original on the
  same inputs (relative error per parameter, the worst reported);
- the loss after --steps AdamW steps from the same initial weights and the same data, FACT
  against eager; for autocast cases also eager against eager on a second data order (the
  spread a run-to-run difference has);
- peak memory of one step per variant (torch.cuda.max_memory_allocated);
- time to optimize, and what FACT composed in each graph.

Cases (--models): mlp_f32 and mingpt_f32 (float32, precision strict, TF32 off as PyTorch's
float32 default), mingpt_bf16 and llama_bf16 (float32 weights under torch.autocast bfloat16).
Writes <out-dir>/training-<device slug>-<date>[-tag].json (schema fact.bench.training/1) after
every case. `--device cpu --small`: a smoke run on narrow models (host reference; its times are
no performance figures).

Usage (device): PYTHONPATH=python python3 bench/training/run_training.py [--models ...]
    [--steps 200] [--iters 20] [--time-budget 500]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
import traceback
import warnings
from datetime import date
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
for extra in (REPO_ROOT / "bench" / "models", REPO_ROOT / "python"):
    if str(extra) not in sys.path:
        sys.path.append(str(extra))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import fact  # noqa: E402
from fact.versions import collect_versions  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Cases


class DeepMLP(nn.Module):
    """KernelBench-style deep MLP: Linear + ReLU layers."""

    def __init__(self, width: int = 4096, depth: int = 3, out: int = 1024):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def build(name: str, small: bool) -> tuple[nn.Module, tuple, str | None, bool]:
    """(float32 model, input shape, FACT precision, autocast bf16)."""
    torch.manual_seed(0)
    if name == "mlp_f32":
        return (DeepMLP(64, 2, 32) if small else DeepMLP()), ((64, 64) if small else (8192, 4096)), "strict", False
    if name in ("mingpt_f32", "mingpt_bf16"):
        from mingpt_block import MinGPTBlock
        model = MinGPTBlock(embed=64, heads=4, max_seq_len=64) if small else MinGPTBlock(max_seq_len=1024)
        shape = (2, 16, 64) if small else (8, 512, 768)
        return (model, shape, "strict", False) if name == "mingpt_f32" else (model, shape, None, True)
    if name == "llama_bf16":
        from llama_block import LlamaDecoderBlock
        widths = (dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128) if small else
                  dict(hidden=2048, heads=16, kv_heads=4, head_dim=128, intermediate=5632))
        shape = (2, 16, 64) if small else (4, 1024, 2048)
        return LlamaDecoderBlock(**widths, max_seq_len=shape[1]), shape, None, True
    raise SystemExit(f"unknown model {name}")


# ---------------------------------------------------------------------------------------------
# Steps


def data(shape: tuple, out_shape: torch.Size, seed: int, device: torch.device) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=generator).to(device),
            torch.randn(tuple(out_shape), generator=generator).to(device))


def make_step(module: nn.Module, params, autocast: bool, device: torch.device) -> tuple[Callable, Any]:
    """(step(x, y) -> loss, the optimizer): zero_grad, forward, MSE loss, backward, AdamW."""
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    context = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with context():
            out = module(x)
        loss = (out.float() - y).square().mean()
        loss.backward()
        optimizer.step()
        return loss
    return step, optimizer


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm().clamp_min(1e-300))


def float64_gradients(model: nn.Module, x, y) -> dict:
    reference = copy.deepcopy(model).double()
    loss = (reference(x.double()) - y.double()).square().mean()
    loss.backward()
    return {name: p.grad.detach() for name, p in reference.named_parameters() if p.grad is not None}


def median_step_ms(steps: dict, x, y, iters: int, device: torch.device) -> dict:
    """Median ms per step of each variant, interleaved round by round."""
    times: dict[str, list] = {name: [] for name in steps}
    for _ in range(3):
        for step in steps.values():
            step(x, y)
    for _ in range(iters):
        for name, step in steps.items():
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                step(x, y)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                step(x, y)
                times[name].append((time.perf_counter() - began) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def peak_memory(step: Callable, x, y, device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step(x, y)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def composed_list(report) -> list:
    return [{"label": c.label, "rule": c.rule, "verified": c.verified} for c in report.composed] if report else []


def final_loss(make: Callable[[], tuple], autocast: bool, shape, out_shape, steps: int, seed: int,
               device) -> float:
    """The loss after `steps` steps of a fresh module (make() -> (module, params)) on the data
    of `seed` (step k draws seed * 100003 + k)."""
    module, params = make()
    step, _ = make_step(module, params, autocast, device)
    loss = None
    for k in range(steps):
        x, y = data(shape, out_shape, seed * 100003 + k, device)
        loss = step(x, y)
    return float(loss)


def run_case(name: str, args, device: torch.device, log) -> dict:
    model, shape, precision, autocast = build(name, args.small)
    model = model.to(device).train()
    result: dict[str, Any] = {"model": name, "precision": precision or "engine's choice",
                              "autocast": "bfloat16" if autocast else None, "input": list(shape),
                              "parameters": sum(p.numel() for p in model.parameters())}
    x0 = torch.randn(shape, device=device)
    with torch.no_grad():
        out_shape = model(x0).shape
    x, y = data(shape, out_shape, 1, device)

    def fact_module(source: nn.Module):
        context = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with context, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fact.optimize(source, (x,), precision, tune=args.tune,
                                 work_dir=Path(args.work_dir) / name)

    # FACT: optimize (timed), the report, the first step's gradients against float64.
    fact_model = copy.deepcopy(model)
    started = time.perf_counter()
    composed = fact_module(fact_model)
    result["optimize_s"] = time.perf_counter() - started
    report = composed.fact_report
    result["composed"] = {"forward": composed_list(report.forward), "backward": composed_list(report.backward)}
    result["left_to_pytorch"] = {which: [{"what": item.what, "reason": item.reason[:300]}
                                         for item in (getattr(report, which).left_to_pytorch if getattr(report, which) else [])]
                                 for which in ("forward", "backward")}
    log(f"{name}: optimized for training in {result['optimize_s']:.1f} s; forward "
        f"{len(result['composed']['forward'])}, backward {len(result['composed']['backward'])} composed")
    want = float64_gradients(model, x, y)
    step, _ = make_step(composed, fact_model.parameters(), autocast, device)
    step(x, y)
    errors = {n: rel_err(p.grad, want[n]) for n, p in fact_model.named_parameters() if p.grad is not None}
    eager_model = copy.deepcopy(model)
    eager_step, _ = make_step(eager_model, eager_model.parameters(), autocast, device)
    eager_step(x, y)
    eager_errors = {n: rel_err(p.grad, want[n]) for n, p in eager_model.named_parameters() if p.grad is not None}
    result["grad_rel_err_max"] = max(errors.values()) if errors else None
    result["eager_grad_rel_err_max"] = max(eager_errors.values()) if eager_errors else None

    # Step times and peak memory: FACT, eager, torch.compile, each from the initial weights.
    fact_timed, eager_timed, compiled_source = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model)
    steps = {"fact": make_step(fact_module(fact_timed), fact_timed.parameters(), autocast, device)[0],
             "eager": make_step(eager_timed, eager_timed.parameters(), autocast, device)[0]}
    try:
        compiled = torch.compile(compiled_source)
        steps["compile"] = make_step(compiled, compiled_source.parameters(), autocast, device)[0]
    except Exception as error:  # noqa: BLE001 - recorded, FACT and eager still timed
        result["compile_error"] = f"{type(error).__name__}: {error}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = median_step_ms(steps, x, y, args.iters, device)
    result["step_ms"] = times
    result["peak_memory_bytes"] = {n: peak_memory(s, x, y, device) for n, s in steps.items()}
    result["speedup_vs_eager"] = times["eager"] / times["fact"]
    if "compile" in times:
        result["speedup_vs_compile"] = times["compile"] / times["fact"]
    result["speedup_vs_best"] = min(v for k, v in times.items() if k != "fact") / times["fact"]
    log(f"{name}: step fact {times['fact']:.3f} ms, " + ", ".join(
        f"{k} {v:.3f} ms" for k, v in times.items() if k != "fact") +
        f"; grads vs float64 {result['grad_rel_err_max']:.3g} (eager {result['eager_grad_rel_err_max']:.3g})")

    # Loss after --steps AdamW steps, FACT against eager on the same data (and eager on another
    # data order for autocast: the spread of a run).
    def fresh_fact():
        source = copy.deepcopy(model)
        return fact_module(source), source.parameters()

    def fresh_eager():
        source = copy.deepcopy(model)
        return source, source.parameters()
    if time.perf_counter() - args.started < args.time_budget:
        losses = {"fact": final_loss(fresh_fact, autocast, shape, out_shape, args.steps, 7, device),
                  "eager": final_loss(fresh_eager, autocast, shape, out_shape, args.steps, 7, device)}
        if autocast:
            losses["eager_again"] = final_loss(fresh_eager, autocast, shape, out_shape, args.steps, 7, device)
        result["final_loss"] = losses
        result["final_loss_rel_diff"] = abs(losses["fact"] - losses["eager"]) / abs(losses["eager"])
        if autocast:
            result["eager_run_to_run_rel_diff"] = abs(losses["eager_again"] - losses["eager"]) / abs(losses["eager"])
        log(f"{name}: loss after {args.steps} steps fact {losses['fact']:.6g}, eager {losses['eager']:.6g} "
            f"(rel diff {result['final_loss_rel_diff']:.3g})")
    else:
        result["final_loss"] = "skipped: time budget"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp_f32,mingpt_f32,mingpt_bf16,llama_bf16")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--tune", type=int, default=0)
    parser.add_argument("--time-budget", type=float, default=500.0)
    parser.add_argument("--out-dir", default="bench/results")
    parser.add_argument("--work-dir", default="out/training")
    parser.add_argument("--tag", default="")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="narrow models (smoke runs)")
    args = parser.parse_args()
    args.started = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # PyTorch's float32 default
        torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    slug = name.lower().replace(" ", "-")
    out = Path(args.out_dir) / f"training-{slug}-{date.today().isoformat()}{'-' + args.tag if args.tag else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"schema": "fact.bench.training/1", "device": name, "versions": collect_versions(device),
                "settings": {k: v for k, v in vars(args).items() if k != "started"},
                "timing": "median of interleaved full steps (CUDA events), no L2 flush", "cases": []}

    def log(text: str) -> None:
        print(f"[training {time.perf_counter() - args.started:6.1f}s] {text}", flush=True)

    for case in args.models.split(","):
        if time.perf_counter() - args.started > args.time_budget:
            document["cases"].append({"model": case, "skipped": "time budget"})
            continue
        try:
            document["cases"].append(run_case(case, args, device, log))
        except Exception as error:  # noqa: BLE001 - recorded, next case
            traceback.print_exc()
            document["cases"].append({"model": case, "error": f"{type(error).__name__}: {error}"})
        out.write_text(json.dumps(document, indent=1))
        torch._dynamo.reset()
    out.write_text(json.dumps(document, indent=1))
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
