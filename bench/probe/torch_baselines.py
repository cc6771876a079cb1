"""Probe: the device's software and cuBLAS (through PyTorch) rates on the GEMM suite shapes.

Planning aid only (not a results file): prints a table of torch.matmul times per case.
"""
import torch, time, json, os, sys
import torch.nn.functional as F
from triton.testing import do_bench

def bench(fn):
    return do_bench(fn, warmup=50, rep=300, return_mode="median")

cases = []
dev = "cuda"
def mk(*shape, dtype):
    return torch.randn(*shape, device=dev, dtype=dtype)

for dtype, tf32 in [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False)]:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    tag = "bf16" if dtype == torch.bfloat16 else ("tf32" if tf32 else "fp32")
    a, b = mk(4096, 4096, dtype=dtype), mk(4096, 4096, dtype=dtype)
    ms = bench(lambda: a @ b); cases.append((f"square_4096_{tag}", ms, 2 * 4096**3 / ms / 1e9))
    a, b = mk(128, 512, 1024, dtype=dtype), mk(128, 1024, 2048, dtype=dtype)
    ms = bench(lambda: torch.bmm(a, b)); cases.append((f"batched_{tag}", ms, 2 * 128 * 512 * 1024 * 2048 / ms / 1e9))
    a, b = mk(256, 524288, dtype=dtype), mk(524288, 256, dtype=dtype)
    ms = bench(lambda: a @ b); cases.append((f"largek_{tag}", ms, 2 * 256 * 256 * 524288 / ms / 1e9))
torch.backends.cuda.matmul.allow_tf32 = False
x = mk(65536, 768, dtype=torch.bfloat16); w = mk(3072, 768, dtype=torch.bfloat16); bias = mk(3072, dtype=torch.bfloat16)
ms = bench(lambda: torch._addmm_activation(bias, x, w.t(), use_gelu=True)); cases.append(("fc_gelu_lt_fused", ms, 2*65536*768*3072/ms/1e9))
ms = bench(lambda: F.gelu(F.linear(x, w, bias), approximate="tanh")); cases.append(("fc_gelu_eager", ms, 2*65536*768*3072/ms/1e9))
for n, ms, tf in cases:
    print(f"{n:24s} {ms:8.3f} ms {tf:8.1f} TFLOP/s")
