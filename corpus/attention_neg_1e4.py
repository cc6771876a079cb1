"""Causal attention masked with `masked_fill(mask, -1e4)` (the old fp16-safe constant, still in
many codebases), the scale applied to q before the product (`q * head_dim ** -0.5`), head dim 96
(16 heads x 96 = 1536), fused QKV weight with bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ_LEN = 1024
D_MODEL = 1536
N_HEADS = 16

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "D_MODEL": 96, "N_HEADS": 3}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):
        bs, seq, d_model = x.shape
        hd = d_model // self.n_heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(bs, seq, self.n_heads, hd).permute(0, 2, 1, 3)
        k = k.reshape(bs, seq, self.n_heads, hd).permute(0, 2, 1, 3)
        v = v.reshape(bs, seq, self.n_heads, hd).permute(0, 2, 1, 3)
        q = q * hd ** -0.5
        scores = q @ k.transpose(-1, -2)
        future = torch.triu(torch.ones(seq, seq, device=x.device), diagonal=1).bool()
        scores = scores.masked_fill(future, -1e4)
        attn = F.softmax(scores.float(), dim=-1).type_as(q)
        ctx = (attn @ v).permute(0, 2, 1, 3).reshape(bs, seq, d_model)
        return self.out(ctx)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, D_MODEL, dtype=dtype, device=device)]


def get_init_inputs():
    return [D_MODEL, N_HEADS]
