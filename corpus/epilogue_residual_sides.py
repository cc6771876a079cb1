"""Residual adds on either side and a subtraction: `residual + dropout(dense(x))` (residual on
the left, BERT's SelfOutput before its LayerNorm), `dense(h) + h` (on the right) and
`h - proj(h)` (the GEMM result subtracted)."""
import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 1024
HIDDEN = 4096

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN": 64}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)
        self.dense2 = nn.Linear(hidden, hidden)
        self.proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, residual):
        h = residual + self.dropout(self.dense(x))
        h = self.dense2(h) + h
        return h - self.proj(h)


def get_inputs(dtype=torch.float32, device="cpu"):
    x = torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)
    residual = torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)
    return [x, residual]


def get_init_inputs():
    return [HIDDEN]
