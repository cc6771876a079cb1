"""Broadcast batch operands: a 3-D activation @ a 2-D weight, a 4-D activation @ a 2-D weight,
and a [1, heads, d, e] per-head weight broadcast against [batch, heads, t, d] (torch.matmul
broadcasting rules)."""
import torch
import torch.nn as nn

BATCH = 8
HEADS = 16
SEQ_LEN = 1024
HEAD_DIM = 128

CPU_TEST_SIZES = {"BATCH": 2, "HEADS": 2, "SEQ_LEN": 16, "HEAD_DIM": 16}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, heads, head_dim):
        super().__init__()
        d_model = heads * head_dim
        self.w_in = nn.Parameter(torch.randn(d_model, d_model) * d_model ** -0.5)
        self.w_head = nn.Parameter(torch.randn(1, heads, head_dim, head_dim) * head_dim ** -0.5)
        self.w_shared = nn.Parameter(torch.randn(head_dim, head_dim) * head_dim ** -0.5)

    def forward(self, x):
        b, t, d = x.shape
        heads, head_dim = self.w_head.shape[1], self.w_head.shape[2]
        h = torch.matmul(x, self.w_in)                             # [b, t, d] @ [d, d]
        h = h.view(b, t, heads, head_dim).transpose(1, 2)          # [b, h, t, hd]
        h = torch.matmul(h, self.w_head)                           # [b, h, t, hd] @ [1, h, hd, hd]
        h = torch.matmul(h, self.w_shared)                         # [b, h, t, hd] @ [hd, hd]
        return h.transpose(1, 2).reshape(b, t, d)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HEADS * HEAD_DIM, dtype=dtype, device=device)]


def get_init_inputs():
    return [HEADS, HEAD_DIM]
