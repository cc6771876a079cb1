"""Multiplying the GEMM result by other tensors: a learned per-channel LayerScale vector
(CaiT / DINOv2, `x + self.gamma * fc(x)`) and an elementwise gate that is a second input
(`fc(x) * gate`, as in a gated residual)."""
import torch
import torch.nn as nn

BATCH = 32
TOKENS = 256
DIM = 1536

CPU_TEST_SIZES = {"BATCH": 2, "TOKENS": 16, "DIM": 64}
DTYPES = ("float32", "bfloat16")


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-1):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.ls = LayerScale(dim)
        self.out = nn.Linear(dim, dim)
        with torch.no_grad():
            self.ls.gamma.uniform_(0.05, 0.5)

    def forward(self, x, gate):
        x = x + self.ls(self.fc(x))
        return self.out(x) * gate


def get_inputs(dtype=torch.float32, device="cpu"):
    x = torch.randn(BATCH, TOKENS, DIM, dtype=dtype, device=device)
    gate = torch.rand(BATCH, TOKENS, DIM, dtype=dtype, device=device)
    return [x, gate]


def get_init_inputs():
    return [DIM]
