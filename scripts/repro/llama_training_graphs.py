"""Reproduction: the Llama block of the training bench (bench/training/models.py, llama_bf16)
composed for training with cuda_graphs=True, trained for a few AdamW steps under bf16 autocast.
On 2026-11-28 its CUDA graph recording failed ("operation not permitted when stream is
capturing", raised inside the Inductor-compiled remainder) where the minGPT block's did not.
This prints dynamo's recompiles and the first failure's whole traceback, then tries the same
with the remainder run eagerly. Run on one GPU beside other jobs:
    bash scripts/device_parallel.sh 580 script=scripts/repro/llama_training_graphs.py
Environment: SEQ (default 2048), BATCH (default 2)."""
import os
import sys
import time
import traceback

sys.path.insert(0, "python")
sys.path.insert(0, "bench/training")
sys.path.insert(0, "bench/models")
import torch

import fact
from fact.compose.module import ComposedModule
from models import build

torch._logging.set_logs(recompiles=True, graph_breaks=True)
original_uncaptured = ComposedModule._run_uncaptured


def loud_uncaptured(self, args):
    if self._compiled is not None:
        try:
            return self._compiled(*args)
        except Exception:
            print("=== the Inductor-compiled remainder raised:", flush=True)
            traceback.print_exc()
            raise
    return original_uncaptured(self, args)


ComposedModule._run_uncaptured = loud_uncaptured
device = torch.device("cuda")
seq, batch = int(os.environ.get("SEQ", "2048")), int(os.environ.get("BATCH", "2"))
for remainder in ("inductor", "eager"):
    case = build("llama_bf16", small=False, mlp_tokens=0, batch=batch, seq=seq)
    model = case.model.to(device).train()
    x = torch.randn(*case.input_shape, device=device)
    start = time.time()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        composed = fact.optimize(model, (x,), "native", work_dir=f"/tmp/repro-llama-{remainder}",
                                 remainder=remainder, speed_guard=False, strict=True,
                                 cuda_graphs=True)
    print(f"[{remainder}] optimized in {time.time() - start:.1f} s; graphs: "
          f"{composed.fact_report.cuda_graphs}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    try:
        for step in range(5):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = composed(x).float().square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            print(f"[{remainder}] step {step}: loss {loss.item():.6f}", flush=True)
    except Exception:
        print(f"=== [{remainder}] training failed:", flush=True)
        traceback.print_exc()
    torch.cuda.synchronize()
