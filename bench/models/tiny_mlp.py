"""A transformer's MLP (Linear -> tanh GELU -> Linear, plus the residual) small enough to run
through `fact optimize` on a CPU in seconds: the README's first example without a GPU.

Problem size: B, T, C = 4, 32, 128, hidden 512 (every GEMM dimension a multiple of 16, so the
bf16 kernels are accepted as they would be at full size). KernelBench-style: the module class
plus get_inputs() / get_init_inputs().
"""
import torch
import torch.nn as nn

BATCH, SEQ_LEN, EMBED, HIDDEN = 4, 32, 128, 512


class TinyMLP(nn.Module):
    def __init__(self, embed: int = EMBED, hidden: int = HIDDEN):
        super().__init__()
        self.fc = nn.Linear(embed, hidden)
        self.proj = nn.Linear(hidden, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(nn.functional.gelu(self.fc(x), approximate="tanh"))


def get_inputs(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    return [torch.randn(BATCH, SEQ_LEN, EMBED, dtype=dtype, device=device)]


def get_init_inputs():
    return []
