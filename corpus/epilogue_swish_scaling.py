"""Swish written as `x * torch.sigmoid(x)` then a scale (KernelBench level 2
"Matmul_Swish_Scaling"): the SiLU formula, not F.silu, has to be recognized."""
import torch
import torch.nn as nn

BATCH_SIZE = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "IN_FEATURES": 64, "OUT_FEATURES": 64}
DTYPES = ("float32", "bfloat16")
SCALING_FACTOR = 2.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.matmul(x)
        x = x * torch.sigmoid(x)  # Swish activation
        x = x * self.scaling_factor
        return x


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH_SIZE, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALING_FACTOR]
