"""Attention with einsum products ("bhqd,bhkd->bhqk" and "bhqk,bhkd->bhqd"), heads split by
`rearrange`-style reshape/permute, the causal mask applied in place (`masked_fill_`), head dim 96
(24 heads x 96 = 2304)."""
import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 1024
DIM = 2304
HEADS = 24

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "DIM": 96, "HEADS": 3}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        # b n (h d) -> b h n d
        q, k, v = (t.reshape(b, n, h, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        sim = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.scale
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).triu_(1)
        sim.masked_fill_(causal, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("bhqk,bhkd->bhqd", attn, v)
        out = out.permute(0, 2, 1, 3).reshape(b, n, -1)  # b h n d -> b n (h d)
        return self.to_out(out)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [DIM, HEADS]
