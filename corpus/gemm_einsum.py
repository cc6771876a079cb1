"""einsum spellings of GEMMs, as in code ported from JAX/Mesh-TF: per-head projection weights
stored [d_model, heads, head_dim] ("btd,dhk->bhtk"), a batched "bij,bjk->bik" mixing step, and
the output projection "bhtk,hkd->btd" (a contraction over two modes)."""
import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 1024
D_MODEL = 2048
HEADS = 16
HEAD_DIM = 128

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "D_MODEL": 64, "HEADS": 2, "HEAD_DIM": 16}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wi = nn.Parameter(torch.randn(D_MODEL, HEADS, HEAD_DIM) * D_MODEL ** -0.5)
        self.wo = nn.Parameter(torch.randn(HEADS, HEAD_DIM, D_MODEL) * (HEADS * HEAD_DIM) ** -0.5)
        self.mix = nn.Parameter(torch.randn(HEADS, HEAD_DIM, HEAD_DIM) * HEAD_DIM ** -0.5)

    def forward(self, x):
        b, t, _ = x.shape
        h = torch.einsum("btd,dhk->bhtk", x, self.wi)                  # [b, h, t, k]
        h = h.reshape(b * HEADS, t, HEAD_DIM)
        mix = self.mix.repeat(b, 1, 1)                                  # [b*h, k, k]
        h = torch.einsum("bij,bjk->bik", h, mix).reshape(b, HEADS, t, HEAD_DIM)
        return torch.einsum("bhtk,hkd->btd", h, self.wo)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, D_MODEL, dtype=dtype, device=device)]


def get_init_inputs():
    return []
