"""torch.matmul on two 4-D operands [batch, heads, m, k] @ [batch, heads, k, n]: a batched GEMM
with two batch modes. The right operand is a transposed view of a [batch, heads, n, k] tensor,
as attention's q @ k^T is, so the batch dims do not collapse into one stride."""
import torch
import torch.nn as nn

BATCH = 8
HEADS = 16
M = 1024
N = 1024
K = 128

CPU_TEST_SIZES = {"BATCH": 2, "HEADS": 3, "M": 32, "N": 16, "K": 16}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def forward(self, a, b):
        # a: [batch, heads, m, k]; b: [batch, n, heads, k] (as produced by a projection + view)
        b = b.transpose(1, 2)                    # [batch, heads, n, k], non-contiguous
        return torch.matmul(a, b.transpose(-2, -1))


def get_inputs(dtype=torch.float32, device="cpu"):
    a = torch.randn(BATCH, HEADS, M, K, dtype=dtype, device=device)
    b = torch.randn(BATCH, N, HEADS, K, dtype=dtype, device=device)
    return [a, b]


def get_init_inputs():
    return []
