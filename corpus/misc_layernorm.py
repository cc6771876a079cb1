"""Normalization only, no GEMM (FACT should find nothing and leave it to PyTorch): nn.LayerNorm,
a parameter-free `F.layer_norm(x, shape)` (OLMo style), and ConvNeXt's channels-first LayerNorm
written by hand (mean, biased variance, rsqrt) over [batch, channels, h, w]."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
CHANNELS = 1024
HEIGHT = 32
WIDTH = 32

CPU_TEST_SIZES = {"BATCH": 2, "CHANNELS": 64, "HEIGHT": 4, "WIDTH": 4}
DTYPES = ("float32", "bfloat16")


class ChannelsFirstLayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm_cf = ChannelsFirstLayerNorm(channels)
        self.norm = nn.LayerNorm(channels, eps=1e-5)
        with torch.no_grad():
            for p in (self.norm_cf.weight, self.norm.weight):
                p.uniform_(0.5, 1.5)
            for p in (self.norm_cf.bias, self.norm.bias):
                p.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.norm_cf(x)                         # [b, c, h, w]
        x = x.permute(0, 2, 3, 1)                   # channels last
        x = self.norm(x)
        return F.layer_norm(x * 2.0 + 1.0, (x.shape[-1],))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH, dtype=dtype, device=device) * 3.0 + 1.0]


def get_init_inputs():
    return [CHANNELS]
