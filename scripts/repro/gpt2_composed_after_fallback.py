"""Reproduction: the composed GPT-2 forward (corpus/whole_models.py, full size) replayed after
the steps the whole-model bench runs in the same process: optimize, replay, torch.cuda.empty_cache,
torch.compile, torch.compile(mode="max-autotune"), a replay of the composed forward after each,
synchronizing after every step so that a fault names the step. On 2026-11-28 a replay faulted
("unspecified launch failure") after max-autotune in the bench, with the GEMM list's old order;
this script with the ping-pong-first order ran clean. Run on one GPU beside other jobs:
    bash scripts/device_parallel.sh 580 script=scripts/repro/gpt2_composed_after_fallback.py
Environment: TUNE (default 2), MAX_AUTOTUNE (default 1)."""
import os
import sys
import time

sys.path.insert(0, "python")
sys.path.insert(0, ".")
import torch
import corpus.whole_models as W
import fact
spec = W.FULL_MODELS["gpt2_lm_full"]
dev = torch.device("cuda")
model = spec.build().to(device=dev, dtype=torch.bfloat16).eval()
example = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in spec.inputs(spec.batch, 0))
t0 = time.time()
with torch.no_grad():
    composed = fact.optimize(model, example, "native", tune=int(os.environ.get("TUNE", "2")), work_dir="/tmp/repro-gpt2")
print(f"optimized {time.time()-t0:.1f}s; runs: {composed.fact_report.runs}; graphs: {composed.fact_report.cuda_graphs}", flush=True)
def step(what, fn, n=3):
    for i in range(n):
        with torch.no_grad():
            fn()
        torch.cuda.synchronize()
    print("ok:", what, flush=True)
print("shape graphs:", composed._shape_graphs.describe() if composed._shape_graphs else None, "cuda_graph:", composed._cuda_graph, flush=True)
step("composed after optimize", lambda: composed._run_composed(example))
print("shape graphs:", composed._shape_graphs.describe() if composed._shape_graphs else None, flush=True)
step("uncaptured", lambda: composed._run_uncaptured(example))
torch.cuda.empty_cache()
step("composed after empty_cache", lambda: composed._run_composed(example))
c = torch.compile(model)
step("torch.compile", lambda: c(*example))
step("composed after torch.compile", lambda: composed._run_composed(example))
if os.environ.get("MAX_AUTOTUNE", "1") == "1":
    m = torch.compile(model, mode="max-autotune")
    step("max-autotune", lambda: m(*example))
    step("composed after max-autotune", lambda: composed._run_composed(example))
print("all ok")
