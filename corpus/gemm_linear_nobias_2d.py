"""nn.Linear(bias=False) on a 2-D activation [tokens, hidden]: an LLM up-projection on flattened
tokens (Llama-2-7B's up_proj shape at full size), a plain mm with no epilogue."""
import torch
import torch.nn as nn

TOKENS = 8192
HIDDEN = 4096
INTERMEDIATE = 11008

CPU_TEST_SIZES = {"TOKENS": 32, "HIDDEN": 64, "INTERMEDIATE": 176}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)

    def forward(self, hidden_states):
        return self.up_proj(hidden_states)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return []
