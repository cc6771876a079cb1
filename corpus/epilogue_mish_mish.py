"""Linear -> Mish -> Mish (KernelBench level 2 "Matmul_Mish_Mish"): two activations in a row, of
a kind FACT's epilogues may not cover; the decline path must leave them correct."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZE = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "IN_FEATURES": 64, "OUT_FEATURES": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = F.mish(x)
        x = F.mish(x)
        return x


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH_SIZE, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
