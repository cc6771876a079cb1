"""torch.baddbmm as BLOOM writes attention scores: the ALiBi bias is the `input`, q @ k^T the
product, 1/sqrt(head_dim) as alpha (batch and heads flattened into one bmm batch dimension).
Returns the softmax-weighted values (a second bmm)."""
import math

import torch
import torch.nn as nn

BATCH = 4
HEADS = 32
SEQ_LEN = 2048
HEAD_DIM = 128

CPU_TEST_SIZES = {"BATCH": 2, "HEADS": 4, "SEQ_LEN": 32, "HEAD_DIM": 16}
DTYPES = ("float32", "bfloat16")


def alibi_slopes(heads):
    closest = 2 ** math.floor(math.log2(heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(heads - closest)]
    return torch.tensor(slopes)


class Model(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def forward(self, query, key, value):
        # query/key/value: [batch * heads, seq, head_dim]
        bh, seq_len, head_dim = query.shape
        positions = torch.arange(seq_len, device=query.device, dtype=query.dtype)
        alibi = self.slopes.to(query.dtype)[:, None, None] * positions[None, None, :]  # [heads, 1, seq]
        alibi = alibi.repeat(bh // self.heads, 1, 1)                                   # [bh, 1, seq]
        scores = torch.baddbmm(alibi, query, key.transpose(1, 2),
                               beta=1.0, alpha=1.0 / math.sqrt(head_dim))
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
        return torch.bmm(probs, value)


def get_inputs(dtype=torch.float32, device="cpu"):
    shape = (BATCH * HEADS, SEQ_LEN, HEAD_DIM)
    return [torch.randn(shape, dtype=dtype, device=device) for _ in range(3)]


def get_init_inputs():
    return [HEADS]
