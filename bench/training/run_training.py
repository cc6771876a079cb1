#!/usr/bin/env python3
"""The training benchmark: full training steps (zero_grad, forward, loss, backward, AdamW step)
of a module composed for training by FACT (`fact.optimize(model.train(), ...)`: AOTAutograd's
forward and backward graphs each composed; docs/compose.md, "Training") against the original
eagerly and torch.compile of the original, each variant with its own copy of the same initial
weights and its own AdamW.

Per model (--models; bench/training/models.py):
  - the time to optimize, and what FACT composed in the forward and the backward graph;
  - the first step's parameter gradients on inputs the module was not traced with, FACT's and
    eager's, against float64 autograd of the original (float32 cases: FACT within
    --grad-rtol, 1e-5 = `strict`'s bound);
  - the median time of a full step, the variants timed interleaved (CUDA events, no L2 flush:
    bench/training/steps.py says why), and the speedups (variant's time / FACT's);
  - the peak memory of a step (torch.cuda.max_memory_allocated), FACT's against eager's;
  - with --profile (the default; CUDA only), one step of each variant under torch.profiler:
    its kernels' device time split by who wrote them (FACT, the vendor GEMM and attention
    libraries, Triton, the optimizer; fact.kernel_profile) and the largest kernels named;
  - --steps AdamW steps from the initial weights over a fixed pool of batches, then the trained
    weights' mean loss over the pool (run eagerly by each variant's plain module: the final loss
    judged): float32 cases at the first data-order seed, FACT's against eager's (within
    --loss-rtol, 1e-4), and every variant's against the original trained in float64 by the
    same steps (`vs_float64_rel`: whose float32 rounding moved the loss); bf16-autocast cases
    at every seed of --seeds, FACT's against eager's at the same seed, judged by eager's own spread across the seeds (the largest difference
    between its final losses). torch.compile trains at the first seed too (its difference is
    reported). Each run's per-step losses are kept, sampled.

float32 runs with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, PyTorch's default).
Writes <out-dir>/training-<device slug>-<date>[-tag].json (schema fact.bench.training/1) after
every model and every phase of one, so a timeout keeps what was measured.

Usage (device): PYTHONPATH=python python3 bench/training/run_training.py
    [--models mlp_f32,mingpt_f32,mingpt_bf16,llama_bf16] [--steps 200] [--time-budget 500]
Smoke (CPU, host reference, narrow models): ... --device cpu --small
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import traceback
import warnings
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
for extra in (HERE, REPO_ROOT / "python"):
    if str(extra) not in sys.path:
        sys.path.append(str(extra))

import torch  # noqa: E402

import fact  # noqa: E402
from fact.compose.training_module import TrainingComposedModule  # noqa: E402
from fact.kernel_profile import kernel_profile  # noqa: E402
from fact.versions import collect_versions  # noqa: E402
from models import Case, build  # noqa: E402
from steps import (Data, Trainer, autocast_context, float64_gradients, gradients,  # noqa: E402
                   loss_of, peak_step_mib, rel_errors, reset, step_times_ms, synchronize)

FELL_BACK = "running the original"


def graph_summary(report) -> dict | None:
    """What one graph (forward or backward) composed and left to PyTorch."""
    if report is None:
        return None
    return {"composed": [{"label": c.label, "kinds": [call.kind for call in c.calls], "nodes": c.nodes,
                          "rel_err": c.rel_err, "tolerance": c.tolerance, "verified": c.verified,
                          "calls_ms": c.calls_ms, "subgraph_ms": c.subgraph_ms} for c in report.composed],
            "kinds": sorted(call.kind for c in report.composed for call in c.calls),
            "left": [{"what": x.what, "reason": x.reason, "stage": x.stage} for x in report.left_to_pytorch][:30],
            "runs": report.runs, "remainder": report.remainder, "notes": report.notes[:10],
            "stage_seconds": report.stage_seconds}


def summarize_run(losses: list[float]) -> dict:
    every = max(1, len(losses) // 20)
    return {"first": losses[0], "final": losses[-1], "min": min(losses), "every": every,
            "sampled": losses[::every]}


def rel_diff(got: float, want: float) -> float:
    return abs(got - want) / max(abs(want), 1e-30)


class ModelRun:
    """One model through every phase; `result` is its part of the results document, saved
    (by `save`) after every phase."""

    def __init__(self, name: str, args, device: torch.device, log: Callable, save: Callable):
        self.args, self.device, self.log, self.save = args, device, log, save
        tokens = int(name.split("-")[1]) if name.startswith("mlp_f32-") else args.mlp_tokens[0]
        self.case: Case = build(name, small=args.small, mlp_tokens=tokens, batch=args.batch, seq=args.seq)
        self.result: dict[str, Any] = {"model": name, "dtype": self.case.dtype_label,
                                       "precision": self.case.precision, "input": list(self.case.input_shape),
                                       "skipped": []}

    def over_budget(self, phase: str) -> bool:
        if time.perf_counter() - self.args.started > self.args.time_budget:
            self.result["skipped"].append(phase)
            self.log(f"{self.case.name}: time budget spent, skipping {phase}")
            return True
        return False

    def run(self) -> dict:
        args, device, case = self.args, self.device, self.case
        model = case.model.to(device).train()
        self.initial = copy.deepcopy(model.state_dict())
        self.data = Data(case.input_shape, args.pool, device)
        check_x, check_target = Data(case.input_shape, 1, device, seed=99).batches[0]

        # FACT: composed for training (inside the autocast the steps run under: the traced graphs
        # hold its casts)
        fact_model = copy.deepcopy(model)
        start = time.perf_counter()
        with warnings.catch_warnings(), autocast_context(device, case.autocast):
            warnings.simplefilter("ignore")
            composed = fact.optimize(fact_model, (self.data.batches[0][0],), case.precision,
                                     work_dir=Path(args.work_dir) / case.name, remainder=args.remainder,
                                     tune=args.tune, speed_guard=args.speed_guard, strict=True,
                                     cuda_graphs=True if args.cuda_graphs else None)
        self.result["optimize_s"] = time.perf_counter() - start
        report = composed.fact_report
        # composed, and not handed to the faster baseline by the never-slower check in training
        self.result["trains_composed"] = isinstance(composed, TrainingComposedModule) and not composed.handed_over
        self.result["report"] = {"runs": report.runs, "speed": report.speed, "cuda_graphs": report.cuda_graphs,
                                 "forward": graph_summary(report.forward),
                                 "backward": graph_summary(report.backward),
                                 "left": [{"what": x.what, "reason": x.reason} for x in report.left_to_pytorch],
                                 "notes": list(report.notes)}
        self.log(f"{case.name}: optimized for training in {self.result['optimize_s']:.1f} s; "
                 f"forward {self._kinds('forward')}, backward {self._kinds('backward')}")
        for note in report.notes:  # the training forms traced in (fact.compose.training_forms), or not
            self.log(f"{case.name}: {note}")
        self.save()

        self.variants = {"fact": Trainer(composed, fact_model.parameters(), device, case.autocast, args.lr)}
        self.modules = {"fact": fact_model}
        eager = copy.deepcopy(model)
        self.variants["eager"] = Trainer(eager, eager.parameters(), device, case.autocast, args.lr)
        self.modules["eager"] = eager
        compiled = [("compile", copy.deepcopy(model), {}), *((label, m, {}) for label, m in case.baselines.items())]
        if args.cuda_graphs:
            # FACT with CUDA graphs against torch.compile with them (its graph trees)
            compiled.append(("compile_reduce_overhead", copy.deepcopy(model), {"mode": "reduce-overhead"}))
        for label, module, options in compiled:
            module = module.to(device).train()
            self.variants[label] = Trainer(torch.compile(module, **options), module.parameters(), device,
                                           case.autocast, args.lr)
            self.modules[label] = module

        self.check_gradients(model, check_x, check_target)
        del model
        phases = [self.first_steps, self.time_steps, self.measure_memory]
        if args.profile and device.type == "cuda":
            phases.append(self.profile_steps)
        for phase in (*phases, self.train_runs):
            if self.over_budget(phase.__name__):
                break
            phase()
            self.save()
        return self.result

    def _kinds(self, which: str) -> str:
        summary = self.result["report"][which]
        if not summary:
            return "no graph"
        kinds = summary["kinds"]
        return ", ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds))) or "nothing"

    def check_gradients(self, model, x, target) -> None:
        """The first step's gradients on fresh inputs: FACT's and eager's against float64."""
        case, device = self.case, self.device
        reference = float64_gradients(model, x, target)
        errors = {}
        for label in ("fact", "eager"):
            got = gradients(self.variants[label].forward, self.modules[label], x, target, device, case.autocast)
            errors[label] = rel_errors(got, reference)
        del reference
        worst = {label: max(e.values()) for label, e in errors.items()}
        self.result["grad_rel_err"] = {"per_parameter": errors, "max": worst,
                                       "bound": None if case.autocast else self.args.grad_rtol}
        if case.autocast is None:
            self.result["grad_within_bound"] = worst["fact"] <= self.args.grad_rtol
        self.log(f"{case.name}: gradients vs float64, largest rel err FACT {worst['fact']:.3g}, "
                 f"eager {worst['eager']:.3g}")

    def first_steps(self) -> None:
        """Each variant's first step (torch.compile compiles here), timed apart."""
        x, target = self.data.batches[0]
        first = {}
        for label, trainer in self.variants.items():
            synchronize(self.device)
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainer.step(x, target)
                synchronize(self.device)
            first[label] = time.perf_counter() - start
            if label == "fact":
                self.result["fact_fell_back"] = any(FELL_BACK in str(w.message) for w in caught)
        self.result["first_step_s"] = first

    def time_steps(self) -> None:
        x, target = self.data.batches[0]
        steps = {label: (lambda t=trainer: t.step(x, target)) for label, trainer in self.variants.items()}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            times = step_times_ms(steps, self.device, self.args.warmup, self.args.iters)
        if any(FELL_BACK in str(w.message) for w in caught):
            self.result["fact_fell_back"] = True
        self.result["step_ms"] = {label: t["median_ms"] for label, t in times.items()}
        self.result["step_spread_ms"] = {label: [t["p10_ms"], t["p90_ms"]] for label, t in times.items()}
        self.result["timer"] = times["fact"]["timer"]
        fact_ms = times["fact"]["median_ms"]
        baselines = {label: t["median_ms"] for label, t in times.items() if label != "fact"}
        self.result["speedup"] = {f"vs_{label}": ms / fact_ms for label, ms in baselines.items()}
        self.result["speedup"]["vs_best"] = min(baselines.values()) / fact_ms
        self.log(f"{self.case.name}: step ms " + ", ".join(f"{k} {v:.4g}" for k, v in self.result["step_ms"].items())
                 + "; speedup " + ", ".join(f"{k} {v:.3f}" for k, v in self.result["speedup"].items()))

    def measure_memory(self) -> None:
        x, target = self.data.batches[0]
        memory = {label: peak_step_mib(lambda t=trainer: t.step(x, target), self.device)
                  for label, trainer in self.variants.items()}
        if memory["fact"] is None:
            self.result["memory"] = None
            return
        self.result["memory"] = memory
        self.result["memory_step_ratio_vs_eager"] = (memory["fact"]["step_mib"]
                                                     / max(memory["eager"]["step_mib"], 1e-9))
        self.log(f"{self.case.name}: step memory MiB "
                 + ", ".join(f"{k} {v['step_mib']:.0f}" for k, v in memory.items()))

    def profile_steps(self) -> None:
        """Where a step's GPU time goes, per variant: its kernels under torch.profiler
        (fact.kernel_profile), split by who wrote them (FACT, the vendor GEMM / attention
        libraries, Triton, the optimizer) with the largest kernels named."""
        x, target = self.data.batches[0]
        profiles = {}
        for label, trainer in self.variants.items():
            try:
                profiles[label] = kernel_profile(lambda t=trainer: t.step(x, target), self.device,
                                                 grad=True, top=15)
            except Exception as error:  # noqa: BLE001 - a profile is extra
                profiles[label] = {"error": str(error).splitlines()[0][:300]}
        self.result["profile"] = profiles
        for label, profile in profiles.items():
            if "by_source" in profile:
                self.log(f"{self.case.name}: {label} step kernels {profile['total_ms']:.3f} ms: "
                         + ", ".join(f"{k} {v:.3f}" for k, v in profile["by_source"].items()))

    def train_runs(self) -> None:
        """--steps AdamW steps from the initial weights per (variant, seed)."""
        args, case = self.args, self.case
        seeds = args.seeds if case.autocast is not None else args.seeds[:1]
        plan = [(label, seed) for seed in seeds for label in ("eager", "fact")]
        plan += [(label, seeds[0]) for label in self.variants if label not in ("eager", "fact")]
        runs = self.result.setdefault("runs", [])
        for label, seed in plan:
            if self.over_budget(f"train {label} seed {seed}"):
                break
            reset(self.modules[label], self.initial)
            trainer = self.variants[label]
            trainer.new_optimizer()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                losses = trainer.losses(self.data, self.data.order(seed, args.steps))
            if label == "fact" and any(FELL_BACK in str(w.message) for w in caught):
                self.result["fact_fell_back"] = True
            evaluated = self.evaluate(self.modules[label])
            runs.append({"variant": label, "seed": seed, "steps": len(losses), "eval": evaluated,
                         **summarize_run(losses)})
            self.log(f"{case.name}: {label} seed {seed}: loss {losses[0]:.6g} -> {losses[-1]:.6g}, "
                     f"eval {evaluated:.6g}")
            self.save()
        if case.autocast is None and not self.over_budget("train float64"):
            runs.append(self.float64_run(seeds[0]))
            self.save()
        self.result["loss"] = self.judge_losses(runs, seeds)

    def float64_run(self, seed: int) -> dict:
        """The float32 cases' reference: the original module in float64 trained by the same
        steps (AdamW, the same data order, batches converted), evaluated in float64. Who is
        closer to it says whose float32 rounding moved the loss (eager's float32 GEMMs are
        less accurate than `strict`'s: the first step's gradients against float64 show it)."""
        module = copy.deepcopy(self.modules["eager"]).double()
        module.load_state_dict({name: value.double() if value.is_floating_point() else value
                                for name, value in self.initial.items()})
        data = SimpleNamespace(batches=[(x.double(), target.double()) for x, target in self.data.batches])
        trainer = Trainer(module, module.parameters(), self.device, None, self.args.lr)
        losses = trainer.losses(data, self.data.order(seed, self.args.steps))
        evaluated = self.evaluate(module, data.batches)
        self.log(f"{self.case.name}: float64 seed {seed}: loss {losses[0]:.6g} -> {losses[-1]:.6g}, "
                 f"eval {evaluated:.9g}")
        return {"variant": "float64", "seed": seed, "steps": len(losses), "eval": evaluated,
                **summarize_run(losses)}

    def evaluate(self, module, batches: list | None = None) -> float:
        """The trained weights' mean loss over the whole data pool (`batches`: the pool in
        another dtype, for the float64 reference), run by the plain module (eagerly, under the
        case's autocast, no grad): the same code for every variant, and no dependence on which
        batch a run's last step drew."""
        with torch.no_grad(), autocast_context(self.device, self.case.autocast):
            losses = [loss_of(module(x), target) for x, target in batches or self.data.batches]
        return float(torch.stack(losses).mean())

    def judge_losses(self, runs: list[dict], seeds: list[int]) -> dict:
        """The evaluated losses after the runs (`evaluate`): FACT's against eager's at each
        seed, against --loss-rtol (float32) or eager's spread across the seeds (autocast)."""
        final = {(r["variant"], r["seed"]): r["eval"] for r in runs}
        last = {(r["variant"], r["seed"]): r["final"] for r in runs}
        verdict: dict[str, Any] = {}
        pairs = [s for s in seeds if ("fact", s) in final and ("eager", s) in final]
        verdict["last_step_fact_vs_eager_rel"] = {str(s): rel_diff(last[("fact", s)], last[("eager", s)])
                                                  for s in pairs}
        verdict["fact_vs_eager_rel"] = {str(s): rel_diff(final[("fact", s)], final[("eager", s)]) for s in pairs}
        for label in self.variants:
            if label not in ("fact", "eager") and (label, seeds[0]) in final and ("eager", seeds[0]) in final:
                verdict[f"{label}_vs_eager_rel"] = rel_diff(final[(label, seeds[0])], final[("eager", seeds[0])])
        if self.case.autocast is None:
            if ("float64", seeds[0]) in final:
                reference = final[("float64", seeds[0])]
                verdict["vs_float64_rel"] = {label: rel_diff(final[(label, seeds[0])], reference)
                                             for label in self.variants if (label, seeds[0]) in final}
            verdict["bound_rel"] = self.args.loss_rtol
            verdict["within_bound"] = bool(pairs) and all(v <= self.args.loss_rtol
                                                          for v in verdict["fact_vs_eager_rel"].values())
        else:
            eager_finals = [final[("eager", s)] for s in seeds if ("eager", s) in final]
            spread = max(eager_finals) - min(eager_finals) if len(eager_finals) > 1 else None
            verdict["eager_spread_abs"] = spread
            verdict["fact_vs_eager_abs"] = {str(s): abs(final[("fact", s)] - final[("eager", s)]) for s in pairs}
            verdict["within_eager_spread"] = (spread is not None and bool(pairs) and
                                              all(v <= spread for v in verdict["fact_vs_eager_abs"].values()))
        return verdict


def expand_models(models: str, mlp_tokens: list[int]) -> list[str]:
    """`mlp_f32` becomes one entry per --mlp-tokens value (mlp_f32-4096, ...)."""
    names = []
    for name in models.split(","):
        names += [f"mlp_f32-{t}" for t in mlp_tokens] if name == "mlp_f32" else [name]
    return names


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp_f32,mingpt_f32,mingpt_bf16,llama_bf16")
    parser.add_argument("--mlp-tokens", default=None, help="rows per batch of mlp_f32, comma-separated "
                                                           "(default 4096,8192; --small: 64)")
    parser.add_argument("--batch", type=int, default=None, help="the blocks' batch (default per model)")
    parser.add_argument("--seq", type=int, default=None, help="the blocks' sequence length (default per model)")
    parser.add_argument("--steps", type=int, default=None, help="AdamW steps per run (default 200; --small: 5)")
    parser.add_argument("--seeds", default="0,1,2", help="data-order seeds (bf16 autocast cases: all)")
    parser.add_argument("--pool", type=int, default=8, help="batches in the data pool")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--grad-rtol", type=float, default=1e-5)
    parser.add_argument("--loss-rtol", type=float, default=1e-4)
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps per variant (default 3; --small: 1)")
    parser.add_argument("--iters", type=int, default=None, help="timed steps per variant (default 20; --small: 3)")
    parser.add_argument("--tune", type=int, default=0)
    parser.add_argument("--remainder", default=None, choices=["inductor", "eager"],
                        help="how each graph's PyTorch remainder runs (default inductor; --small: "
                             "eager, which keeps the CPU smoke run short)")
    parser.add_argument("--speed-guard", action=argparse.BooleanOptionalAction, default=None,
                        help="each replacement timed against the subgraph it replaces (default: on "
                             "CUDA, off on the CPU)")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="profile one step of each variant's kernels (CUDA only)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="compose with cuda_graphs=True (the forward and backward graphs replayed "
                             "through CUDA graph trees) and add torch.compile(mode='reduce-overhead')")
    parser.add_argument("--time-budget", type=float, default=500.0)
    parser.add_argument("--out-dir", default="bench/results")
    parser.add_argument("--work-dir", default="out/training")
    parser.add_argument("--tag", default="")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (host reference)")
    parser.add_argument("--small", action="store_true", help="narrow models, few steps (smoke runs)")
    args = parser.parse_args()
    small = args.small
    args.mlp_tokens = [int(t) for t in (args.mlp_tokens or ("64" if small else "4096,8192")).split(",")]
    args.steps = args.steps or (5 if small else 200)
    args.warmup = args.warmup if args.warmup is not None else (1 if small else 3)
    args.iters = args.iters or (3 if small else 20)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.remainder = args.remainder or ("eager" if small else "inductor")
    if args.speed_guard is None:
        args.speed_guard = args.device.startswith("cuda")
    return args


def main() -> int:
    args = parse_args()
    args.started = time.perf_counter()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    slug = name.lower().replace(" ", "-")
    out = Path(args.out_dir) / f"training-{slug}-{date.today().isoformat()}{'-' + args.tag if args.tag else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "started"}
    settings["allow_tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                              "cudnn": torch.backends.cudnn.allow_tf32}
    document = {"schema": "fact.bench.training/1", "device": name, "versions": collect_versions(device),
                "settings": settings, "models": []}

    def log(text: str) -> None:
        print(f"[training {time.perf_counter() - args.started:6.1f}s] {text}", flush=True)

    def save() -> None:
        out.write_text(json.dumps(document, indent=1))

    for model_name in expand_models(args.models, args.mlp_tokens):
        if time.perf_counter() - args.started > args.time_budget:
            document["models"].append({"model": model_name, "skipped": ["all (time budget)"]})
            continue
        run = None
        try:
            run = ModelRun(model_name, args, device, log, save)
            document["models"].append(run.result)
            run.run()
        except Exception as error:  # noqa: BLE001 - recorded, next model
            traceback.print_exc()
            entry = run.result if run is not None else {"model": model_name}
            if run is None:
                document["models"].append(entry)
            entry["error"] = f"{type(error).__name__}: {error}"
        save()
        del run
        torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    save()
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
