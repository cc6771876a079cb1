"""Linear -> x * 0.5 -> Hardtanh(-2, 2) -> GELU (KernelBench level 2 "Gemm_Scaling_Hardtanh_GELU"):
a scale, a clamp and an erf GELU in a row after the GEMM. A known bug repro: the epilogue chain
must keep the order (scale before the clamp) and the clamp bounds."""
import torch
import torch.nn as nn

BATCH_SIZE = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "IN_FEATURES": 64, "OUT_FEATURES": 128}
DTYPES = ("float32", "bfloat16")
SCALING_FACTOR = 0.5
HARDTANH_MIN = -2.0
HARDTANH_MAX = 2.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor, hardtanh_min, hardtanh_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor
        self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)
        self.gelu = nn.GELU()

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scaling_factor
        x = self.hardtanh(x)
        x = self.gelu(x)
        return x


def get_inputs(dtype=torch.float32, device="cpu"):
    # scaled up so that the clamp is active on a good share of the outputs
    return [4.0 * torch.randn(BATCH_SIZE, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALING_FACTOR, HARDTANH_MIN, HARDTANH_MAX]
