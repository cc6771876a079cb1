"""A LoRA-adapted projection written with F.linear: the frozen base `F.linear(x, W, b)` plus
`lora_B(lora_A(dropout(x))) * (alpha / r)` (rank-16 GEMMs: a skinny N, then a skinny K)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096
RANK = 16

CPU_TEST_SIZES = {"TOKENS": 32, "IN_FEATURES": 64, "OUT_FEATURES": 96, "RANK": 16}
DTYPES = ("float32", "bfloat16")
LORA_ALPHA = 32.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, rank):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        nn.init.uniform_(self.bias, -in_features ** -0.5, in_features ** -0.5)
        self.lora_A = nn.Linear(in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, out_features, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.02)  # zero at init in training; nonzero here
        self.lora_dropout = nn.Dropout(0.05)
        self.scaling = LORA_ALPHA / rank

    def forward(self, x):
        result = F.linear(x, self.weight, self.bias)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(TOKENS, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, RANK]
