"""minGPT-style pre-LN transformer block (Karpathy's minGPT `Block`), written out by hand.

Problem size: B, T, C = 128, 512, 768 with 8 heads (head dim 96). Attention is the explicit
form FACT has to discover: q @ k^T * 1/sqrt(hd), masked_fill with a causal mask buffer,
softmax, @ v. The MLP uses the tanh GELU written as its formula. No dropout.

KernelBench-style: the module class plus get_inputs() / get_init_inputs().
"""
import math

import torch
import torch.nn as nn

BATCH, SEQ_LEN, EMBED, HEADS = 128, 512, 768, 8


class CausalSelfAttention(nn.Module):
    def __init__(self, embed: int, heads: int, max_seq_len: int):
        super().__init__()
        assert embed % heads == 0
        self.heads = heads
        self.c_attn = nn.Linear(embed, 3 * embed)
        self.c_proj = nn.Linear(embed, embed)
        mask = torch.tril(torch.ones(max_seq_len, max_seq_len))
        self.register_buffer("bias", mask.view(1, 1, max_seq_len, max_seq_len))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, embed = x.size()
        head_dim = embed // self.heads
        q, k, v = self.c_attn(x).split(embed, dim=2)
        q = q.view(batch, seq_len, self.heads, head_dim).transpose(1, 2)
        k = k.view(batch, seq_len, self.heads, head_dim).transpose(1, 2)
        v = v.view(batch, seq_len, self.heads, head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        att = att.masked_fill(self.bias[:, :, :seq_len, :seq_len] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(batch, seq_len, embed)
        return self.c_proj(y)


class NewGELU(nn.Module):
    """GELU, tanh approximation, as the formula (as in minGPT / GPT-2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MLP(nn.Module):
    def __init__(self, embed: int):
        super().__init__()
        self.c_fc = nn.Linear(embed, 4 * embed)
        self.act = NewGELU()
        self.c_proj = nn.Linear(4 * embed, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class MinGPTBlock(nn.Module):
    def __init__(self, embed: int = EMBED, heads: int = HEADS, max_seq_len: int = SEQ_LEN):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embed)
        self.attn = CausalSelfAttention(embed, heads, max_seq_len)
        self.ln_2 = nn.LayerNorm(embed)
        self.mlp = MLP(embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


def get_inputs(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    return [torch.randn(BATCH, SEQ_LEN, EMBED, dtype=dtype, device=device)]


def get_init_inputs():
    return []
