"""minGPT's MLP: submodules in an nn.ModuleDict and the forward as a lambda closing over them,
`self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))`, with the written-out tanh GELU
(NewGELU), plus the residual; GPT-2-small width. Beware: `copy.deepcopy(model)` copies the
lambda by reference, so the copy's forward still calls the ORIGINAL's c_fc/c_proj."""
import math

import torch
import torch.nn as nn

BATCH = 32
SEQ_LEN = 1024
N_EMBD = 768

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "N_EMBD": 64}
DTYPES = ("float32", "bfloat16")


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Model(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(
            c_fc=nn.Linear(n_embd, 4 * n_embd),
            c_proj=nn.Linear(4 * n_embd, n_embd),
            act=NewGELU(),
            dropout=nn.Dropout(0.1),
        ))
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))  # MLP forward

    def forward(self, x):
        return x + self.mlpf(self.ln_2(x))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, N_EMBD, dtype=dtype, device=device)]


def get_init_inputs():
    return [N_EMBD]
