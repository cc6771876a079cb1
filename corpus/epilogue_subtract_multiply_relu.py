"""Linear -> subtract a constant -> multiply by a constant -> torch.relu (KernelBench level 2
"Matmul_Subtract_Multiply_ReLU")."""
import torch
import torch.nn as nn

BATCH_SIZE = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "IN_FEATURES": 64, "OUT_FEATURES": 80}
DTYPES = ("float32", "bfloat16")
SUBTRACT_VALUE = 2.0
MULTIPLY_VALUE = 1.5


class Model(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        x = self.linear(x)
        x = x - self.subtract_value
        x = x * self.multiply_value
        x = torch.relu(x)
        return x


def get_inputs(dtype=torch.float32, device="cpu"):
    return [4.0 * torch.randn(BATCH_SIZE, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SUBTRACT_VALUE, MULTIPLY_VALUE]
