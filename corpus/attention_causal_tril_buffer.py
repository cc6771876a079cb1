"""Causal self-attention as minGPT / nanoGPT's slow path writes it: fused c_attn, split into
q, k, v, view + transpose into heads (head dim 64), a registered `tril` buffer of block_size
(longer than T) sliced `[:, :, :T, :T]`, masked_fill with -inf, softmax, dropout (eval), @ v."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ_LEN = 1024
BLOCK_SIZE = 2048
N_EMBD = 1024
N_HEAD = 16

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "BLOCK_SIZE": 32, "N_EMBD": 64, "N_HEAD": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, N_EMBD, dtype=dtype, device=device)]


def get_init_inputs():
    return [N_EMBD, N_HEAD, BLOCK_SIZE]
