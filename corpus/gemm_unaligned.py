"""Deliberately unaligned GEMM sizes, kept odd in CPU_TEST_SIZES too: K = 770 (a 768-d embedding
concatenated with two scalar features) and N = 50 classes, so bf16 kernels that need 16-byte
aligned rows must decline (or pad) rather than crash."""
import torch
import torch.nn as nn

TOKENS = 16384
IN_FEATURES = 770
HIDDEN = 1024
NUM_CLASSES = 50

CPU_TEST_SIZES = {"TOKENS": 32, "IN_FEATURES": 770, "HIDDEN": 64, "NUM_CLASSES": 50}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, in_features, hidden, num_classes):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, embedding, extra):
        x = torch.cat([embedding, extra], dim=-1)   # [tokens, 768 + 2]
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs(dtype=torch.float32, device="cpu"):
    embedding = torch.randn(TOKENS, IN_FEATURES - 2, dtype=dtype, device=device)
    extra = torch.randn(TOKENS, 2, dtype=dtype, device=device)
    return [embedding, extra]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, NUM_CLASSES]
