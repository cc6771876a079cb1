"""GELU written out with erf, as the original BERT code does:
`x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))` after a Linear with bias (BERT-large's
intermediate dense layer)."""
import math

import torch
import torch.nn as nn

BATCH = 16
SEQ_LEN = 512
HIDDEN = 1024
INTERMEDIATE = 4096

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN": 64, "INTERMEDIATE": 256}
DTYPES = ("float32", "bfloat16")


def gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)
        self.intermediate_act_fn = gelu

    def forward(self, hidden_states):
        hidden_states = self.dense(hidden_states)
        return self.intermediate_act_fn(hidden_states)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return []
