"""Linear -> sigmoid -> scale -> add the pre-activation back (KernelBench level 2
"Gemm_Sigmoid_Scaling_ResidualAdd"): the residual is the GEMM's own output, not an input."""
import torch
import torch.nn as nn

BATCH_SIZE = 8192
INPUT_SIZE = 4096
HIDDEN_SIZE = 4096

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "INPUT_SIZE": 64, "HIDDEN_SIZE": 64}
DTYPES = ("float32", "bfloat16")
SCALING_FACTOR = 2.0


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(input_size, hidden_size)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.gemm(x)
        original_x = x
        x = torch.sigmoid(x)
        x = x * self.scaling_factor
        x = x + original_x
        return x


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH_SIZE, INPUT_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE, SCALING_FACTOR]
