"""GPT-2's Conv1D layout: weights stored (in, out) and applied as `addmm(bias, x.view(-1, nx),
w)` (the original spelling) and as `x @ w + b`; here as GPT-2's MLP (c_fc -> tanh GELU -> c_proj)
at GPT-2-medium width."""
import math

import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 1024
N_EMBD = 1024

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "N_EMBD": 64}
DTYPES = ("float32", "bfloat16")


class Conv1D(nn.Module):
    """A linear layer with the weight transposed: y = x W + b, W of shape (nx, nf)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class MatmulConv1D(Conv1D):
    def forward(self, x):
        return x @ self.weight + self.bias


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Model(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = Conv1D(4 * n_embd, n_embd)
        self.c_proj = MatmulConv1D(n_embd, 4 * n_embd)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, N_EMBD, dtype=dtype, device=device)]


def get_init_inputs():
    return [N_EMBD]
