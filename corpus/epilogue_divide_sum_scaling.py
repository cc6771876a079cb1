"""`torch.matmul(x, self.weight.T)` -> divide by 2 -> sum over the features (keepdim) -> scale
(KernelBench level 2 "Gemm_Divide_Sum_Scaling"): the reduction ends the epilogue, so only the
GEMM (+ divide) can be fused; the output is [batch, 1]."""
import torch
import torch.nn as nn

BATCH_SIZE = 8192
INPUT_SIZE = 4096
HIDDEN_SIZE = 4096

CPU_TEST_SIZES = {"BATCH_SIZE": 32, "INPUT_SIZE": 64, "HIDDEN_SIZE": 48}
DTYPES = ("float32", "bfloat16")
SCALING_FACTOR = 1.5


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * input_size ** -0.5)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)  # Gemm
        x = x / 2  # Divide
        x = torch.sum(x, dim=1, keepdim=True)  # Sum
        x = x * self.scaling_factor  # Scaling
        return x


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH_SIZE, INPUT_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE, SCALING_FACTOR]
