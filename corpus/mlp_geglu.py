"""GeGLU feed-forward (Shazeer 2020, as in T5 v1.1 / diffusion transformers): one Linear to
2 x inner, `chunk(2, dim=-1)`, `x * F.gelu(gate)`, then the output Linear."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ_LEN = 1024
DIM = 2048
INNER = 5120

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "DIM": 64, "INNER": 128}
DTYPES = ("float32", "bfloat16")


class GEGLU(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, hidden_states):
        hidden_states, gate = self.proj(hidden_states).chunk(2, dim=-1)
        return hidden_states * F.gelu(gate)


class Model(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.net = nn.ModuleList([GEGLU(dim, inner), nn.Dropout(0.0), nn.Linear(inner, dim)])

    def forward(self, hidden_states):
        for module in self.net:
            hidden_states = module(hidden_states)
        return hidden_states


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [DIM, INNER]
