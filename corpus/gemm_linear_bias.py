"""nn.Linear with bias on a 3-D activation [batch, seq, in] -> [batch, seq, out]: the most common
GEMM spelling (aten.linear; addmm once the leading dims are flattened)."""
import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 1024
IN_FEATURES = 4096
OUT_FEATURES = 4096

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "IN_FEATURES": 64, "OUT_FEATURES": 128}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.proj(x)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, IN_FEATURES, dtype=dtype, device=device)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
