"""Biaffine arc scorer (Dozat & Manning's dependency parser): torch.matmul of a 3-D tensor with a
2-D weight, then a 3-D @ 3-D matmul against the other operand transposed, plus a bias term.
Also two MLPs with nn.Sequential in front."""
import torch
import torch.nn as nn

BATCH = 32
SEQ_LEN = 512
HIDDEN = 1024
ARC_DIM = 512

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN": 64, "ARC_DIM": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden, arc_dim):
        super().__init__()
        self.arc_head = nn.Sequential(nn.Linear(hidden, arc_dim), nn.ReLU())
        self.arc_dep = nn.Sequential(nn.Linear(hidden, arc_dim), nn.ReLU())
        self.U = nn.Parameter(torch.randn(arc_dim, arc_dim) / arc_dim ** 0.5)
        self.u_bias = nn.Parameter(torch.zeros(arc_dim))

    def forward(self, encoded):
        head = self.arc_head(encoded)                       # [b, t, a]
        dep = self.arc_dep(encoded)                         # [b, t, a]
        left = torch.matmul(dep, self.U)                    # 3-D @ 2-D
        scores = torch.matmul(left, head.transpose(1, 2))   # 3-D @ 3-D -> [b, t, t]
        scores = scores + torch.matmul(head, self.u_bias).unsqueeze(1)
        return scores


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN, ARC_DIM]
