"""Non-contiguous GEMM operands: channels-first features [batch, channels, frames] transposed
before a Linear (as after a conv front end), the class token dropped with a slice `x[:, 1:]`,
and a weight column slice `w[:, :k]` (the first half of a shared weight)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
CHANNELS = 1024
FRAMES = 1024
HIDDEN = 2048

CPU_TEST_SIZES = {"BATCH": 2, "CHANNELS": 32, "FRAMES": 17, "HIDDEN": 64}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self.in_proj = nn.Linear(channels, hidden)
        # one weight, two consumers: the left half projects the tokens
        self.shared = nn.Parameter(torch.randn(hidden, 2 * hidden) * (2 * hidden) ** -0.5)

    def forward(self, features):
        x = self.in_proj(features.transpose(1, 2))         # A is [b, frames, channels] with stride 1 on frames
        tokens = x[:, 1:, :]                               # drop the first frame (like a class token)
        w = self.shared[:, : self.shared.shape[1] // 2]    # [hidden, hidden], row stride 2*hidden
        return F.linear(tokens, w)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, CHANNELS, FRAMES, dtype=dtype, device=device)]


def get_init_inputs():
    return [CHANNELS, HIDDEN]
