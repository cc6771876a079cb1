"""Non-causal (bidirectional) attention as timm's ViT writes it: one qkv Linear, `reshape(B, N, 3,
H, D).permute(2, 0, 3, 1, 4)` and `unbind(0)`, q scaled before the product, softmax with no mask,
attention dropout in eval; ViT-L width (16 heads x 64), 256 patch tokens."""
import torch
import torch.nn as nn

BATCH = 64
TOKENS = 256
DIM = 1024
NUM_HEADS = 16

CPU_TEST_SIZES = {"BATCH": 2, "TOKENS": 16, "DIM": 64, "NUM_HEADS": 4}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True, attn_drop=0.1, proj_drop=0.1):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        return self.proj_drop(x)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, TOKENS, DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [DIM, NUM_HEADS]
