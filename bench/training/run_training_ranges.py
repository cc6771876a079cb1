"""Training over declared ranges, measured: one module composed by `fact.optimize(model.train(),
..., dynamic_shapes=...)` trains at every size of a declared range; at each size of a grid, its
full step (forward, backward, AdamW) is timed against eager and `torch.compile(dynamic=True)` of
the original (interleaved, same run), and its first-step parameter gradients are compared with
float64 autograd of the original at its own weights, as eager's are.

    python bench/training/run_training_ranges.py --out-dir OUT [--model mlp_f32|mingpt_f32]
        [--range MIN..MAX] [--example N] [--sizes N,N,...] [--small] [--device cuda]

Models (float32, `strict`, TF32 off): `mlp_f32`, the training benchmark's deep MLP (--width,
--layers; input (tokens, width), the tokens declared); `mingpt_f32`, the minGPT block (embed
768, 8 heads; input (--batch, seq, 768), the sequence declared). --small: widths for a CPU smoke
run. Results: OUT/training-ranges-<device>-<date>[-<model>].json (versions, optimize time, the
report (what runs each bucket: fact.optimize's never-slower check in training), per size the
three step times, ratios against the faster baseline, gradient errors and, on CUDA, each
variant's step kernels by source (--no-profile: none): kernel time far below the step time
means the host bounds the step; and the composed module's step host time by operator
(--no-host-profile: none)).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

import torch  # noqa: E402

import fact  # noqa: E402
from fact.dynamic_ranges import Range  # noqa: E402
from fact.kernel_profile import host_profile, kernel_profile  # noqa: E402
from fact.versions import collect_versions  # noqa: E402
from models import DeepMLP  # noqa: E402
from steps import Trainer, float64_gradients, gradients, rel_errors, step_times_ms  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--work-dir", default="/tmp/fact-training-ranges")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="mlp_f32", choices=("mlp_f32", "mingpt_f32"))
    parser.add_argument("--width", type=int, default=4096, help="mlp_f32's width")
    parser.add_argument("--layers", type=int, default=3, help="mlp_f32's layers")
    parser.add_argument("--batch", type=int, default=8, help="mingpt_f32's batch")
    parser.add_argument("--small", action="store_true", help="small widths (a CPU smoke run)")
    parser.add_argument("--range", "--tokens", dest="range", default=None,
                        help="the declared range MIN..MAX (mlp_f32: tokens, default 256..8192; "
                             "mingpt_f32: sequence, default 64..1024)")
    parser.add_argument("--example", type=int, default=None,
                        help="the example's size in the declared dimension (default 4096 / 512)")
    parser.add_argument("--sizes", default=None,
                        help="sizes timed (default 4096,512,1000,2048,3000,6000,8192 / 512,128,200,384,700,1024)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--tune", type=int, default=0)
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="per size, each variant's step kernels under torch.profiler (CUDA only): "
                             "kernel time against step time says whether the host bounds the step")
    parser.add_argument("--host-profile", action=argparse.BooleanOptionalAction, default=True,
                        help="per size, the composed module's step under torch.profiler's CPU "
                             "activity: the operators and functions holding the host")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    suffix = "" if args.model == "mlp_f32" else f"-{args.model}"
    out = Path(args.out_dir) / f"training-ranges-{name.lower().replace(' ', '-')}-{date.today().isoformat()}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    mlp = args.model == "mlp_f32"
    low, high = (int(v) for v in (args.range or ("256..8192" if mlp else "64..1024")).split(".."))
    sizes = [int(v) for v in (args.sizes or ("4096,512,1000,2048,3000,6000,8192" if mlp
                                             else "512,128,200,384,700,1024")).split(",")]
    example_size = args.example or (4096 if mlp else 512)

    def log(text: str) -> None:
        print(f"[ranges {time.perf_counter() - started:6.1f}s] {text}", flush=True)

    torch.manual_seed(0)
    if mlp:
        width = 64 if args.small else args.width
        model, declared_dim, name_of_size = DeepMLP(width, args.layers).to(device), 0, "tokens"
        shape_at = lambda size: (size, width)  # noqa: E731
        label = f"DeepMLP(width={width}, layers={args.layers}), float32"
    else:
        from mingpt_block import MinGPTBlock
        embed, heads = (64, 4) if args.small else (768, 8)
        model = MinGPTBlock(embed=embed, heads=heads, max_seq_len=2 * high).to(device)
        declared_dim, name_of_size = 1, "seq"
        shape_at = lambda size: (args.batch, size, embed)  # noqa: E731
        label = f"MinGPTBlock(embed={embed}, heads={heads}), batch {args.batch}, float32"
    eager_model, compile_model = copy.deepcopy(model), copy.deepcopy(model)
    example = torch.randn(*shape_at(example_size), device=device)
    optimize_started = time.perf_counter()
    composed = fact.optimize(model.train(), (example,), "strict", work_dir=args.work_dir, tune=args.tune,
                             dynamic_shapes=({declared_dim: Range(name_of_size, low, high)},))
    optimize_s = time.perf_counter() - optimize_started
    log(f"optimized in {optimize_s:.1f} s: {type(composed).__name__}")
    print(composed.fact_report, flush=True)
    compiled = torch.compile(compile_model, dynamic=True)
    trainers = {"fact": Trainer(composed, model.parameters(), device, None, 1e-4),
                "eager": Trainer(eager_model, eager_model.parameters(), device, None, 1e-4),
                "compile": Trainer(compiled, compile_model.parameters(), device, None, 1e-4)}
    document = {"schema": "fact.bench.training-ranges/1", "device": name,
                "versions": collect_versions(device), "precision": "strict (TF32 off)",
                "settings": vars(args), "model": label,
                "declared": f"{name_of_size}={low}..{high} (input dim {declared_dim})", "optimize_s": optimize_s,
                "composed": type(composed).__name__, "report": composed.fact_report.to_json(), "sizes": []}
    generator = torch.Generator().manual_seed(7)
    for tokens in sizes:
        x = torch.randn(*shape_at(tokens), generator=generator).to(device)
        target = torch.randn(*shape_at(tokens), generator=generator).to(device)
        # each variant against float64 autograd at its own weights (the steps timed before
        # moved each variant's weights by its own rounding)
        errors = {variant: max(rel_errors(gradients(module, owner, x, target, device, None),
                                          float64_gradients(owner, x, target)).values())
                  for variant, module, owner in (("fact", composed, model), ("eager", eager_model, eager_model))}
        times = step_times_ms({variant: (lambda t=trainer: t.step(x, target)) for variant, trainer in trainers.items()},
                              device, args.warmup, args.iters)
        fact_ms, eager_ms, compile_ms = (times[v]["median_ms"] for v in ("fact", "eager", "compile"))
        best = min(eager_ms, compile_ms)
        entry = {"size": tokens, name_of_size: tokens, "inside_range": low <= tokens <= high, "step_ms": times,
                 "vs_eager": eager_ms / fact_ms, "vs_compile": compile_ms / fact_ms, "vs_best": best / fact_ms,
                 "grad_rel_err_vs_float64": errors}
        document["sizes"].append(entry)
        log(f"{name_of_size} {tokens}: step ms fact {fact_ms:.3f}, eager {eager_ms:.3f}, compile {compile_ms:.3f}; "
            f"vs best {best / fact_ms:.3f}; grad err fact {errors['fact']:.2e}, eager {errors['eager']:.2e}")
        if args.profile and device.type == "cuda":
            entry["kernel_profile"] = profiles = {}
            for variant, trainer in trainers.items():
                try:
                    profiles[variant] = kernel_profile(lambda t=trainer: t.step(x, target), device, grad=True)
                except Exception as error:  # noqa: BLE001 - a profile is extra
                    profiles[variant] = {"error": str(error).splitlines()[0][:300]}
            log(f"{name_of_size} {tokens}: step kernels ms " + "; ".join(
                f"{v} {p['total_ms']:.3f} ({', '.join(f'{k} {ms:.3f}' for k, ms in p['by_source'].items())})"
                for v, p in profiles.items() if "total_ms" in p))
        if args.host_profile:
            try:
                entry["host_profile"] = hosted = host_profile(lambda t=trainers["fact"]: t.step(x, target),
                                                              grad=True)
                log(f"{name_of_size} {tokens}: fact step host {hosted['wall_ms']:.3f} ms; most self time: "
                    + ", ".join(f"{r['op']} {r['self_ms']:.3f}" for r in hosted["ops"][:6]))
            except Exception as error:  # noqa: BLE001 - a profile is extra
                entry["host_profile"] = {"error": str(error).splitlines()[0][:300]}
        out.write_text(json.dumps(document, indent=1))
    out.write_text(json.dumps(document, indent=1))
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
