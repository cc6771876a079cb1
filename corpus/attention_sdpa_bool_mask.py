"""F.scaled_dot_product_attention with an explicit boolean causal mask (`attn_mask=tril`, True =
attend) instead of is_causal, head dim 64 (16 heads x 64 = 1024), with an explicit `scale=`."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
SEQ_LEN = 1024
DIM = 1024
HEADS = 16

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "DIM": 64, "HEADS": 4}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        h = self.heads
        q, k, v = (proj(x).view(b, n, h, d // h).transpose(1, 2) for proj in (self.to_q, self.to_k, self.to_v))
        mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril(diagonal=0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=(d // h) ** -0.5)
        out = out.transpose(1, 2).reshape(b, n, d)
        return self.to_out(out)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [DIM, HEADS]
