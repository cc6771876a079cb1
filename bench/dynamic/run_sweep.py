#!/usr/bin/env python3
"""The serving sweep of a dynamic range: one module optimized once for a declared range
(`fact.optimize(..., dynamic_shapes=...)`), then called at every shape of a batch × sequence
grid, each shape timed against the original eagerly, `torch.compile(dynamic=True)` (compiled
once), `torch.compile(mode="reduce-overhead", dynamic=True)` (its CUDA graphs) and, for the
shapes `--per-shape` names, `torch.compile` recompiled for that shape; each FACT output checked
against the original in float64 on fresh inputs. With --cuda-graphs (default) the module is
optimized with cuda_graphs=True (a graph per size tuple) and also timed with them bypassed.

Also per model: the time to optimize the range against the time to optimize the hint's single
shape with the same tuning depth, and the first call of a shape never seen before (inside the
range) and its second call (which captures its CUDA graph) against a warm call, beside `torch.compile(dynamic=False)`'s recompile for the same event.

Models (--models): mingpt (bench/models/mingpt_block.py, bf16), llama (bench/models/
llama_block.py at a 1B-class width, GQA, bf16), llama_hf (transformers' LlamaDecoderLayer from
corpus/hf_llama_decoder.py at the same width, bf16), gpt2 (transformers' GPT2Block, bf16), mlp_f32
(a KernelBench-style float32 MLP in `strict`; its sequence dimension is static).

Writes <out-dir>/dynamic-<device slug>-<date>.json (device, versions, precision per model, each
shape's times and same-run ratios, geomeans) after every model.

Usage (device): PYTHONPATH=python python3 bench/dynamic/run_sweep.py [--models mingpt,llama]
    [--batches 1,4,16,64] [--seqs 128,512,2048] [--tune 0] [--time-budget 400]
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
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
from torch.export import Dim  # noqa: E402

import fact  # noqa: E402
from fact.timing import l2_flushed_medians_ms  # noqa: E402
from fact.versions import collect_versions  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Models


class KernelBenchMLP(nn.Module):
    """KernelBench level-3 style MLP: Linear + ReLU layers, float32."""

    def __init__(self, features: int = 4096, hidden: tuple = (4096, 4096), out: int = 1024):
        super().__init__()
        layers, width = [], features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class GPT2BlockOnly(nn.Module):
    """transformers' GPT2Block returning its hidden states only."""

    def __init__(self):
        super().__init__()
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block
        config = GPT2Config(n_embd=768, n_head=12, n_positions=4096, attn_pdrop=0.0,
                            resid_pdrop=0.0, embd_pdrop=0.0)
        config._attn_implementation = "sdpa"
        self.block = GPT2Block(config, layer_idx=0)

    def forward(self, x):
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


def hf_llama_block(max_seq: int, small: bool) -> nn.Module:
    """The corpus' transformers LlamaDecoderLayer (corpus/hf_llama_decoder.py) at a 1B-class
    width (hidden 2048, 16 query / 4 KV heads of 128, intermediate 5632)."""
    import importlib
    if str(REPO_ROOT / "corpus") not in sys.path:
        sys.path.append(str(REPO_ROOT / "corpus"))
    module = importlib.import_module("hf_llama_decoder")
    sizes = dict(module.CPU_TEST_SIZES) if small else dict(
        HIDDEN_SIZE=2048, INTERMEDIATE_SIZE=5632, NUM_HEADS=16, NUM_KV_HEADS=4)
    sizes["MAX_POSITIONS"] = max(max_seq, int(sizes.get("MAX_POSITIONS", 0)))
    for key, value in sizes.items():
        if key not in ("BATCH", "SEQ_LEN"):
            setattr(module, key, value)
    return module.Model()


class FirstOutput(nn.Module):
    """A module returning its inner module's first output when that is a tuple."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        out = self.inner(x)
        return out[0] if isinstance(out, tuple) else out


def build(name: str, max_seq: int, small: bool = False) -> tuple[nn.Module, torch.dtype, str, bool]:
    """(model, dtype, precision, has a sequence dimension); `small`: narrow widths (smoke runs)."""
    torch.manual_seed(0)
    if name == "mingpt":
        from mingpt_block import MinGPTBlock
        return (MinGPTBlock(embed=64, heads=4, max_seq_len=max_seq) if small else
                MinGPTBlock(max_seq_len=max_seq)), torch.bfloat16, "native", True
    if name == "llama":
        from llama_block import LlamaDecoderBlock
        widths = (dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128) if small else
                  dict(hidden=2048, heads=16, kv_heads=4, head_dim=128, intermediate=5632))
        return LlamaDecoderBlock(**widths, max_seq_len=max_seq), torch.bfloat16, "native", True
    if name == "llama_hf":
        return FirstOutput(hf_llama_block(max_seq, small)), torch.bfloat16, "native", True
    if name == "gpt2":
        return GPT2BlockOnly(), torch.bfloat16, "native", True
    if name == "mlp_f32":
        return (KernelBenchMLP(64, (64, 64), 32) if small else KernelBenchMLP()), torch.float32, "strict", False
    raise SystemExit(f"unknown model {name}")


def width_of(model: nn.Module) -> int:
    """The model's input width: its first Linear's in_features, or its first transformers
    Conv1D's (GPT-2 writes its projections as Conv1D, weight [in, out])."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module.in_features
        if type(module).__name__ == "Conv1D":
            return module.weight.shape[0]
    raise ValueError(f"{type(model).__name__}: no Linear or Conv1D to read the width from")


# ---------------------------------------------------------------------------------------------
# Measuring


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = torch.linalg.vector_norm((out.double() - ref).flatten())
    return float(diff / torch.linalg.vector_norm(ref.flatten()).clamp_min(1e-300))


def float64_output(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's output in float64; in halves of the leading dimension when it does not fit
    in memory at once (every model here treats the rows of that dimension independently)."""
    from fact.measure import float64_in_place
    with torch.no_grad(), float64_in_place(model):
        return _float64_rows(model, x)


def _float64_rows(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    try:
        return model(x.double())
    except torch.OutOfMemoryError:
        if x.shape[0] == 1:
            raise
    torch.cuda.empty_cache()
    half = x.shape[0] // 2
    return torch.cat([_float64_rows(model, x[:half]), _float64_rows(model, x[half:])])


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def first_call_ms(fn: Callable[[], Any]) -> float:
    synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        fn()
    synchronize()
    return (time.perf_counter() - start) * 1e3


def profile_first_call(fn: Callable[[], Any], log: Callable[[str], None]) -> None:
    """Logs where the host spends a first call of a new size (cProfile: top 25 by cumulative
    time, top 15 by own time): what the first-call overhead is made of."""
    import cProfile
    import io
    import pstats
    synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    with torch.no_grad():
        fn()
    synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(25)
    stats.sort_stats("tottime").print_stats(15)   # the leaves: which op or call holds the time
    log("first call of a new size, host profile:\n" + text.getvalue())


def medians_ms(fns: dict, iters: int, device: torch.device) -> dict:
    """Interleaved, L2-flushed medians on CUDA (the never-slower check's timer); on the CPU (a
    smoke run of this script) plain medians."""
    if device.type == "cuda":
        return l2_flushed_medians_ms(fns, warmup=3, iters=iters)
    from fact.timing import time_cpu
    with torch.no_grad():
        return {name: time_cpu(fn, 1, iters).median_ms for name, fn in fns.items()}


def sweep_model(name: str, args, device: torch.device, log, save: Callable[[dict], None]) -> dict:
    """One model's sweep; `save(result so far)` after each shape (partial results survive a
    time limit)."""
    batches = [int(b) for b in args.batches.split(",")]
    seqs = [int(s) for s in args.seqs.split(",")]
    # Tables sliced to the sequence length are made longer than the range: torch.export guards
    # `seq != table length` for a slice `[:seq]` of a table exactly as long as the maximum.
    model, dtype, precision, has_seq = build(name, 2 * max(seqs), small=args.small)
    model = model.to(device=device, dtype=dtype).eval()
    if not has_seq:
        seqs = [0]
    hint_batch = batches[len(batches) // 2]
    hint_seq = seqs[len(seqs) // 2]

    def make_input(batch: int, seq: int) -> torch.Tensor:
        shape = (batch, seq, width_of(model)) if has_seq else (batch * (args.mlp_tokens_per_batch), width_of(model))
        return torch.randn(*shape, device=device, dtype=dtype)

    hint = make_input(hint_batch, hint_seq)
    if has_seq:
        dims = {0: Dim("batch", min=min(batches), max=max(batches)),
                1: Dim("seq", min=min(seqs), max=max(seqs))}
    else:
        dims = {0: Dim("tokens", min=min(batches) * args.mlp_tokens_per_batch,
                       max=max(batches) * args.mlp_tokens_per_batch)}
    result: dict[str, Any] = {"model": name, "dtype": str(dtype).replace("torch.", ""),
                              "precision": precision,
                              "range": {d.__name__: [d.min, d.max] for d in dims.values()},
                              "hint": list(hint.shape), "shapes": []}

    # Optimize the hint's single shape, then the range, each with the same tuning depth and a
    # kernel cache of its own (both start cold: the comparison the range's cost is judged by).
    def optimized(label: str, **options):
        cache = Path(args.work_dir) / f"{name}-{label}-kernel-cache"
        previous = os.environ.get("FACT_CACHE_DIR")
        os.environ["FACT_CACHE_DIR"] = str(cache)
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = fact.optimize(model, (hint,), precision, tune=args.tune,
                                       work_dir=Path(args.work_dir) / f"{name}-{label}", **options)
        finally:
            if previous is None:
                os.environ.pop("FACT_CACHE_DIR", None)
            else:
                os.environ["FACT_CACHE_DIR"] = previous
        return module, time.perf_counter() - start

    if args.single:
        single, result["optimize_single_s"] = optimized("single", cuda_graphs=args.cuda_graphs)
        result["optimize_single_stages_s"] = single.fact_report.stage_seconds
        del single
    composed, result["optimize_range_s"] = optimized("range", dynamic_shapes=(dims,), cuda_graphs=args.cuda_graphs)
    report = composed.fact_report
    result["optimize_range_stages_s"] = report.stage_seconds
    result["report"] = {"runs": report.runs, "composed": len(report.composed), "cuda_graphs": report.cuda_graphs,
                        "left": [{"what": x.what, "reason": x.reason, "stage": x.stage}
                                 for x in report.left_to_pytorch][:20],
                        "buckets": getattr(report, "buckets", None)}
    single_s = f"{result['optimize_single_s']:.1f} s" if args.single else "not measured"
    log(f"{name}: optimized the range in {result['optimize_range_s']:.1f} s (single shape "
        f"{single_s}); {report.runs}")

    compiled_dynamic = torch.compile(model, dynamic=True)
    # torch.compile's own CUDA graphs (cudagraph trees), the baseline a user who wants graphs picks
    reduce_overhead = torch.compile(copy.deepcopy(model), mode="reduce-overhead", dynamic=True) \
        if args.reduce_overhead and device.type == "cuda" else None

    def without_graphs(x):
        """The same module with its CUDA graphs bypassed (what they are worth)."""
        graphs = composed.__dict__.get("_shape_graphs")
        composed.__dict__["_shape_graphs"] = None
        try:
            return composed(x)
        finally:
            composed.__dict__["_shape_graphs"] = graphs
    for batch in batches:
        for seq in seqs:
            if time.perf_counter() - args.started > args.time_budget:
                result.setdefault("skipped", []).append([batch, seq])
                continue
            x = make_input(batch, seq)
            case: dict[str, Any] = {"batch": batch, "seq": seq, "input": list(x.shape)}
            try:
                with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    start = time.perf_counter()
                    compiled_dynamic(x)
                    case["compile_dynamic_first_call_ms"] = (time.perf_counter() - start) * 1e3
                    got = composed(x)
                case["fell_back"] = any("running the original" in str(w.message) for w in caught)
                ref = float64_output(model, x)
                case["fact_rel_err"] = rel_err(got, ref)
                with torch.no_grad():
                    case["torch_rel_err"] = rel_err(model(x), ref)
                candidates = {"fact": lambda: composed(x), "eager": lambda: model(x),
                              "compile_dynamic": lambda: compiled_dynamic(x)}
                if args.cuda_graphs:
                    candidates["fact_no_graphs"] = lambda: without_graphs(x)
                if reduce_overhead is not None:
                    candidates["compile_reduce_overhead"] = lambda: reduce_overhead(x).clone()
                times = medians_ms(candidates, args.iters, device)
                case.update({f"{k}_ms": v for k, v in times.items()})
                best = min(times["eager"], times["compile_dynamic"])
                case["speedup_vs_compile_dynamic"] = times["compile_dynamic"] / times["fact"]
                case["speedup_vs_best_of_eager_compile"] = best / times["fact"]
                if "compile_reduce_overhead_ms" in case:
                    case["speedup_vs_compile_reduce_overhead"] = times["compile_reduce_overhead"] / times["fact"]
                if [batch, seq] in args.per_shape:
                    # A fresh module object: dynamo compiles it anew (no cache entry's guards
                    # match it), as a process that compiles for this one shape would.
                    static = torch.compile(copy.deepcopy(model), dynamic=False)
                    start = time.perf_counter()
                    with torch.no_grad():
                        static(x)
                    synchronize()
                    case["compile_per_shape_first_call_ms"] = (time.perf_counter() - start) * 1e3
                    t = medians_ms({"fact": lambda: composed(x), "compile_per_shape": lambda: static(x)},
                                   args.iters, device)
                    case["compile_per_shape_ms"] = t["compile_per_shape"]
                    case["speedup_vs_compile_per_shape"] = t["compile_per_shape"] / t["fact"]
            except Exception as error:  # noqa: BLE001 - recorded, next shape
                case["error"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
            result["shapes"].append(case)
            save(result)
            log(f"  {name} batch {batch} seq {seq}: " + ", ".join(
                f"{k} {v:.4g}" for k, v in case.items() if isinstance(v, float)))

    # A shape never seen: first call against a warm call (FACT), and a recompile (torch.compile).
    if has_seq:
        fresh_batch, fresh_seq = max(1, max(batches) - 3), max(min(seqs), max(seqs) // 2 - 7)
    else:
        fresh_batch, fresh_seq = max(min(batches), max(batches) - 3), 0
    x = make_input(fresh_batch, fresh_seq)
    first = first_call_ms(lambda: composed(x))
    second = first_call_ms(lambda: composed(x))
    third = first_call_ms(lambda: composed(x))    # with CUDA graphs: this call may capture
    warm = min(first_call_ms(lambda: composed(x)) for _ in range(5))
    # What a new size costs PyTorch itself (the allocator's new blocks, cuBLAS's first call of a
    # shape): eager's first call of another size never seen, against its warm call.
    y = make_input(max(1, fresh_batch - 1), max(0, fresh_seq - 2) if has_seq else 0)
    eager_first = first_call_ms(lambda: model(y))
    eager_warm = min(first_call_ms(lambda: model(y)) for _ in range(5))
    if args.profile_new_shape:
        profile_first_call(lambda: composed(make_input(max(1, fresh_batch - 2),
                                                        max(0, fresh_seq - 4) if has_seq else 0)), log)
    static = torch.compile(copy.deepcopy(model), dynamic=False)
    with torch.no_grad():
        static(make_input(hint_batch, hint_seq))
    recompile = first_call_ms(lambda: static(x))
    result["new_shape"] = {"input": list(x.shape), "fact_first_call_ms": first, "fact_warm_call_ms": warm,
                           "fact_first_call_extra_ms": first - warm,
                           "fact_second_call_ms": second, "fact_third_call_ms": third,
                           "eager_input": list(y.shape), "eager_first_call_ms": eager_first,
                           "eager_warm_call_ms": eager_warm, "eager_first_call_extra_ms": eager_first - eager_warm,
                           "compile_recompile_first_call_ms": recompile}
    log(f"{name} new shape: " + ", ".join(f"{k} {v:.4g}" for k, v in result["new_shape"].items()
                                          if isinstance(v, float)))
    ok = [c for c in result["shapes"] if "fact_ms" in c]
    result["geomean_vs_compile_dynamic"] = geomean([c["speedup_vs_compile_dynamic"] for c in ok])
    result["geomean_vs_best_of_eager_compile"] = geomean([c["speedup_vs_best_of_eager_compile"] for c in ok])
    result["shapes_fell_back"] = sum(1 for c in ok if c.get("fell_back"))
    result["shapes_slower_than_best"] = [[c["batch"], c["seq"]] for c in ok
                                         if c["speedup_vs_best_of_eager_compile"] < 0.98]
    with_ro = [c["speedup_vs_compile_reduce_overhead"] for c in ok if "speedup_vs_compile_reduce_overhead" in c]
    if with_ro:
        result["geomean_vs_compile_reduce_overhead"] = geomean(with_ro)
    if args.cuda_graphs:
        result["geomean_no_graphs_vs_compile_dynamic"] = geomean(
            [c["compile_dynamic_ms"] / c["fact_no_graphs_ms"] for c in ok if "fact_no_graphs_ms" in c])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mingpt,gpt2,llama,mlp_f32")
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--seqs", default="128,512,2048")
    parser.add_argument("--mlp-tokens-per-batch", type=int, default=16)
    parser.add_argument("--per-shape", default="1x128,16x512,64x2048",
                        help="shapes BATCHxSEQ timed against torch.compile recompiled for them")
    parser.add_argument("--tune", type=int, default=0)
    parser.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=True,
                        help="optimize with cuda_graphs=True (one graph per size tuple); the "
                             "module is also timed with its graphs bypassed")
    parser.add_argument("--single", action=argparse.BooleanOptionalAction, default=True,
                        help="also optimize the hint's single shape (the planning time compared)")
    parser.add_argument("--reduce-overhead", action=argparse.BooleanOptionalAction, default=True,
                        help="also time torch.compile(mode='reduce-overhead', dynamic=True)")
    parser.add_argument("--profile-new-shape", action="store_true",
                        help="log a host profile (cProfile) of a first call of a new size")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--time-budget", type=float, default=400.0)
    parser.add_argument("--out-dir", default="bench/results")
    parser.add_argument("--work-dir", default="out/dynamic")
    parser.add_argument("--tag", default="")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (host reference)")
    parser.add_argument("--small", action="store_true", help="narrow models (smoke runs)")
    args = parser.parse_args()
    args.started = time.perf_counter()
    args.per_shape = [[int(v) for v in s.split("x")] for s in args.per_shape.split(",") if s]
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    slug = name.lower().replace(" ", "-")
    out = Path(args.out_dir) / f"dynamic-{slug}-{date.today().isoformat()}{'-' + args.tag if args.tag else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"schema": "fact.bench.dynamic/1", "device": name, "versions": collect_versions(device),
                "settings": {k: v for k, v in vars(args).items() if k != "started"}, "models": []}

    def log(text: str) -> None:
        print(f"[dynamic {time.perf_counter() - args.started:6.1f}s] {text}", flush=True)

    def save(partial: dict) -> None:
        out.write_text(json.dumps({**document, "models": [*document["models"], {**partial, "partial": True}]},
                                  indent=1))

    for model in args.models.split(","):
        try:
            document["models"].append(sweep_model(model, args, device, log, save))
        except Exception as error:  # noqa: BLE001 - recorded, next model
            traceback.print_exc()
            document["models"].append({"model": model, "error": f"{type(error).__name__}: {error}"})
        out.write_text(json.dumps(document, indent=1))
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
