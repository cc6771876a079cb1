"""A residual MLP tower of DEPTH blocks built in a ModuleList and run in a Python loop
(`for layer in self.layers: x = x + act(layer(x))`), GELU (erf) via nn.GELU, then an output
Linear. Depth 4 at full size, 1 on the CPU test."""
import torch
import torch.nn as nn

BATCH = 8192
DIM = 4096
DEPTH = 4

CPU_TEST_SIZES = {"BATCH": 32, "DIM": 64, "DEPTH": 1}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])
        self.act = nn.GELU()
        self.head = nn.Linear(dim, dim)

    def forward(self, x):
        for layer in self.layers:
            x = x + self.act(layer(x))
        return self.head(x)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [DIM, DEPTH]
