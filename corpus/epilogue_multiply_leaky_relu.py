"""Linear -> multiply by a constant -> F.leaky_relu(negative_slope=0.1) (KernelBench level 2
"Gemm_Multiply_LeakyReLU"), then nn.LeakyReLU(0.2) after a second Linear (GAN discriminator style)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH_SIZE = 8192
IN_FEATURES = 4096
HIDDEN = 4096
OUT_FEATURES = 1024

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "IN_FEATURES": 64, "HIDDEN": 64, "OUT_FEATURES": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, hidden)
        self.multiplier = multiplier
        self.negative_slope = negative_slope
        self.fc = nn.Linear(hidden, out_features)
        self.act = nn.LeakyReLU(0.2, inplace=True)

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.multiplier
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        return self.act(self.fc(x))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH_SIZE, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES, 2.0, 0.1]
