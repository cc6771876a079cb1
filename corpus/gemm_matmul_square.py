"""torch.matmul of two 2-D inputs, no weights (KernelBench level 1 "square matrix
multiplication"): both operands are graph inputs, not parameters."""
import torch
import torch.nn as nn

N = 8192

CPU_TEST_SIZES = {"N": 64}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs(dtype=torch.float32, device="cpu"):
    A = torch.randn(N, N, dtype=dtype, device=device)
    B = torch.randn(N, N, dtype=dtype, device=device)
    return [A, B]


def get_init_inputs():
    return []
