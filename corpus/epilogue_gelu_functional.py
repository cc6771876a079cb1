"""F.gelu(approximate="tanh") and F.gelu (erf) as functional calls on two chained Linears, with a
scale applied BEFORE the activation (`F.gelu(h * alpha)`) on the first and a bias-free second."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ_LEN = 1024
HIDDEN = 2048

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN": 64}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden, bias=False)
        self.alpha = 1.702

    def forward(self, x):
        h = F.gelu(self.fc1(x) * self.alpha, approximate="tanh")
        return F.gelu(self.fc2(h))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN]
