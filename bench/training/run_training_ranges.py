"""Training over declared ranges, measured: one module composed by `fact.optimize(model.train(),
..., dynamic_shapes=...)` trains at every size of a token range; at each size of a grid, its full
step (forward, backward, AdamW) is timed against eager and `torch.compile(dynamic=True)` of the
original (interleaved, same run), and its first-step parameter gradients are compared with
float64 autograd of the original, as eager's are.

    python bench/training/run_training_ranges.py --out-dir OUT [--width 4096 --layers 3]
        [--tokens 512..8192] [--sizes 512,1000,2048,3000,4096,8192] [--device cuda]

The model is the training benchmark's deep MLP (float32, `strict`, TF32 off): input (tokens,
width), tokens declared as Range("tokens", MIN, MAX). Results:
OUT/training-ranges-<device>-<date>.json (versions, optimize time, per size the three step times,
ratios against the faster baseline, gradient errors, and how many graphs each side compiled).
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
from fact.versions import collect_versions  # noqa: E402
from models import DeepMLP  # noqa: E402
from steps import Trainer, float64_gradients, gradients, rel_errors, step_times_ms  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--work-dir", default="/tmp/fact-training-ranges")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--tokens", default="512..8192", help="the declared range MIN..MAX")
    parser.add_argument("--example", type=int, default=4096, help="the example's token count")
    parser.add_argument("--sizes", default="512,1000,2048,3000,4096,8192")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--tune", type=int, default=0)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = Path(args.out_dir) / f"training-ranges-{name.lower().replace(' ', '-')}-{date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    low, high = (int(v) for v in args.tokens.split(".."))
    sizes = [int(v) for v in args.sizes.split(",")]

    def log(text: str) -> None:
        print(f"[ranges {time.perf_counter() - started:6.1f}s] {text}", flush=True)

    torch.manual_seed(0)
    model = DeepMLP(args.width, args.layers).to(device)
    eager_model, compile_model = copy.deepcopy(model), copy.deepcopy(model)
    example = torch.randn(args.example, args.width, device=device)
    optimize_started = time.perf_counter()
    composed = fact.optimize(model.train(), (example,), "strict", work_dir=args.work_dir, tune=args.tune,
                             dynamic_shapes=({0: Range("tokens", low, high)},))
    optimize_s = time.perf_counter() - optimize_started
    log(f"optimized in {optimize_s:.1f} s: {type(composed).__name__}")
    print(composed.fact_report, flush=True)
    compiled = torch.compile(compile_model, dynamic=True)
    trainers = {"fact": Trainer(composed, model.parameters(), device, None, 1e-4),
                "eager": Trainer(eager_model, eager_model.parameters(), device, None, 1e-4),
                "compile": Trainer(compiled, compile_model.parameters(), device, None, 1e-4)}
    document = {"schema": "fact.bench.training-ranges/1", "device": name,
                "versions": collect_versions(device), "precision": "strict (TF32 off)",
                "settings": vars(args), "model": f"DeepMLP(width={args.width}, layers={args.layers}), float32",
                "declared": f"tokens={low}..{high}", "optimize_s": optimize_s,
                "composed": type(composed).__name__, "report": composed.fact_report.to_json(), "sizes": []}
    generator = torch.Generator().manual_seed(7)
    for tokens in sizes:
        x = torch.randn(tokens, args.width, generator=generator).to(device)
        target = torch.randn(tokens, args.width, generator=generator).to(device)
        # each variant against float64 autograd at its own weights (the steps timed before
        # moved each variant's weights by its own rounding)
        errors = {variant: max(rel_errors(gradients(module, owner, x, target, device, None),
                                          float64_gradients(owner, x, target)).values())
                  for variant, module, owner in (("fact", composed, model), ("eager", eager_model, eager_model))}
        times = step_times_ms({variant: (lambda t=trainer: t.step(x, target)) for variant, trainer in trainers.items()},
                              device, args.warmup, args.iters)
        fact_ms, eager_ms, compile_ms = (times[v]["median_ms"] for v in ("fact", "eager", "compile"))
        best = min(eager_ms, compile_ms)
        entry = {"tokens": tokens, "inside_range": low <= tokens <= high, "step_ms": times,
                 "vs_eager": eager_ms / fact_ms, "vs_compile": compile_ms / fact_ms, "vs_best": best / fact_ms,
                 "grad_rel_err_vs_float64": errors}
        document["sizes"].append(entry)
        log(f"tokens {tokens}: step ms fact {fact_ms:.3f}, eager {eager_ms:.3f}, compile {compile_ms:.3f}; "
            f"vs best {best / fact_ms:.3f}; grad err fact {errors['fact']:.2e}, eager {errors['eager']:.2e}")
        out.write_text(json.dumps(document, indent=1))
    out.write_text(json.dumps(document, indent=1))
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
