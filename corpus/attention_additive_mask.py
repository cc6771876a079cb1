"""Causal attention with an additive mask built in forward (`torch.full(-inf).triu(1)` added to
the scores), separate q/k/v Linears without bias, head dim 128 (32 heads x 128 = 4096), softmax
in float32 then cast back."""
import torch
import torch.nn as nn

BATCH = 2
SEQ_LEN = 2048
HIDDEN = 4096
HEADS = 32

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 32, "HIDDEN": 64, "HEADS": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, hidden_states):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.heads, self.head_dim).transpose(1, 2)

        mask = torch.full((q_len, q_len), float("-inf"), device=hidden_states.device)
        mask = torch.triu(mask, diagonal=1)

        attn_weights = torch.matmul(q, k.transpose(2, 3)) / (self.head_dim ** 0.5)
        attn_weights = attn_weights + mask[None, None, :, :].to(attn_weights.dtype)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN, HEADS]
