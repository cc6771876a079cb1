"""SwiGLU with the gate and up projections fused into one Linear (Phi-3 / many training
codebases): `gate, up = gate_up_proj(x).chunk(2, dim=-1)`, `up * silu(gate)`, written with the
SiLU spelled `gate * torch.sigmoid(gate)`, and hidden = 2/3 * 4 * dim rounded to a multiple of 256."""
import torch
import torch.nn as nn

TOKENS = 8192
DIM = 4096
MULTIPLE_OF = 256

CPU_TEST_SIZES = {"TOKENS": 32, "DIM": 64, "MULTIPLE_OF": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, dim, multiple_of):
        super().__init__()
        hidden_dim = int(2 * (4 * dim) / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.gate_up_proj = nn.Linear(dim, 2 * hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * (gate * torch.sigmoid(gate)))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [DIM, MULTIPLE_OF]
