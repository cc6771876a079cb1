"""torch.bmm on 3-D inputs [batch, m, k] x [batch, k, n] (KernelBench level 1 "batched matrix
multiplication"), then a second bmm against the first operand transposed (x^T x-style)."""
import torch
import torch.nn as nn

BATCH = 64
M = 1024
K = 2048
N = 1024

CPU_TEST_SIZES = {"BATCH": 4, "M": 32, "K": 48, "N": 16}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def forward(self, a, b):
        c = torch.bmm(a, b)                    # [batch, m, n]
        return torch.bmm(c.transpose(1, 2), a)  # [batch, n, k]


def get_inputs(dtype=torch.float32, device="cpu"):
    a = torch.randn(BATCH, M, K, dtype=dtype, device=device) / K ** 0.5
    b = torch.randn(BATCH, K, N, dtype=dtype, device=device)
    return [a, b]


def get_init_inputs():
    return []
