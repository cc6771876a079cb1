"""Transposed operands: `torch.mm(a.t(), b)` (a column-major A, as in a weight-gradient or a
cross-covariance X^T Y) followed by `g @ self.w.T` (nn.Linear's layout written by hand)."""
import torch
import torch.nn as nn

SAMPLES = 8192
DIM_A = 4096
DIM_B = 4096
DIM_OUT = 2048

CPU_TEST_SIZES = {"SAMPLES": 64, "DIM_A": 48, "DIM_B": 64, "DIM_OUT": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, dim_b, dim_out):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim_out, dim_b) * dim_b ** -0.5)

    def forward(self, a, b):
        # a: [samples, dim_a], b: [samples, dim_b]
        cross = torch.mm(a.t(), b) / a.shape[0]
        return cross @ self.w.T


def get_inputs(dtype=torch.float32, device="cpu"):
    a = torch.randn(SAMPLES, DIM_A, dtype=dtype, device=device)
    b = torch.randn(SAMPLES, DIM_B, dtype=dtype, device=device)
    return [a, b]


def get_init_inputs():
    return [DIM_B, DIM_OUT]
