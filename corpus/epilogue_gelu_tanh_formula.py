"""The tanh GELU approximation written out with `x ** 3` and a precomputed sqrt(2/pi) constant
(one of the many hand spellings), after a Linear; then divided by a constant."""
import math

import torch
import torch.nn as nn

TOKENS = 8192
IN_FEATURES = 2048
OUT_FEATURES = 8192

CPU_TEST_SIZES = {"TOKENS": 32, "IN_FEATURES": 64, "OUT_FEATURES": 128}
DTYPES = ("float32", "bfloat16")
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


class GELUTanh(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


class Model(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.act = GELUTanh()
        self.divisor = divisor

    def forward(self, x):
        return self.act(self.fc(x)) / self.divisor


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, 2.0]
