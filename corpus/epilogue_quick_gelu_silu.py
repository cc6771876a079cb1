"""CLIP's QuickGELU `x * torch.sigmoid(1.702 * x)` (a scaled sigmoid gate: not SiLU) on the first
Linear and nn.SiLU on the second: the two must not be confused."""
import torch
import torch.nn as nn

BATCH = 64
SEQ_LEN = 256
WIDTH = 1024

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "WIDTH": 64}
DTYPES = ("float32", "bfloat16")


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor):
        return x * torch.sigmoid(1.702 * x)


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc = nn.Linear(width, width * 4)
        self.gelu = QuickGELU()
        self.c_proj = nn.Linear(width * 4, width)
        self.silu = nn.SiLU()

    def forward(self, x):
        return self.silu(self.c_proj(self.gelu(self.c_fc(x))))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, WIDTH, dtype=dtype, device=device)]


def get_init_inputs():
    return [WIDTH]
