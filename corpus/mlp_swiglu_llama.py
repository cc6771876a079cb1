"""Llama's SwiGLU MLP `down_proj(act_fn(gate_proj(x)) * up_proj(x))`, no biases, at Llama-3-8B
width (hidden 4096, intermediate 14336)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
SEQ_LEN = 2048
HIDDEN_SIZE = 4096
INTERMEDIATE_SIZE = 14336

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN_SIZE": 64, "INTERMEDIATE_SIZE": 224}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN_SIZE, INTERMEDIATE_SIZE, bias=False)
        self.up_proj = nn.Linear(HIDDEN_SIZE, INTERMEDIATE_SIZE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE_SIZE, HIDDEN_SIZE, bias=False)
        self.act_fn = F.silu

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return []
