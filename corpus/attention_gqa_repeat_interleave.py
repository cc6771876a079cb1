"""Grouped-query attention with K/V heads repeated by `repeat_interleave(groups, dim=1)` (32 query
heads, 8 KV heads, head dim 128, Llama-3-8B's attention shape), explicit matmul + softmax with a
boolean `triu` mask and masked_fill(-inf)."""
import math

import torch
import torch.nn as nn

BATCH = 2
SEQ_LEN = 2048
HIDDEN = 4096
N_HEADS = 32
N_KV_HEADS = 8

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 32, "HIDDEN": 128, "N_HEADS": 4, "N_KV_HEADS": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = hidden // n_heads
        self.wq = nn.Linear(hidden, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, hidden, bias=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        n_rep = self.n_heads // self.n_kv_heads
        keys = xk.repeat_interleave(n_rep, dim=1)
        values = xv.repeat_interleave(n_rep, dim=1)

        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        scores = torch.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN, N_HEADS, N_KV_HEADS]
