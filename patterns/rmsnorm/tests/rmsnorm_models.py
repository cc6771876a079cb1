"""Small RMSNorm + projection models for the rmsnorm pattern's tests (discovery fixtures and
CPU composition): Llama's RMSNorm (transformers' LlamaRMSNorm, written out) before q/k/v
projections and before a SwiGLU MLP, and the shapes the prologue must decline."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: float32 statistics, cast back, then the weight."""

    def __init__(self, hidden, eps=1e-6, dim=-1):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps, self.dim = eps, dim

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(self.dim, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(dtype)


class NormQKV(nn.Module):
    """norm -> q, k, v projections (Llama's attention input); `bias`: Qwen2's biases."""

    def __init__(self, hidden=64, q_out=64, kv_out=32, bias=False):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.q = nn.Linear(hidden, q_out, bias=bias)
        self.k = nn.Linear(hidden, kv_out, bias=bias)
        self.v = nn.Linear(hidden, kv_out, bias=bias)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h), self.k(h), self.v(h)


class NormSwiGLU(nn.Module):
    """x + down(silu(gate(norm(x))) * up(norm(x))): Llama's MLP half of the block."""

    def __init__(self, hidden=64, intermediate=128):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class NormAlsoReturned(nn.Module):
    """The normalized value is also an output: the norm must still be computed (declined)."""

    def __init__(self, hidden=64):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h), h.sum(-1)


class NormOverOtherDim(nn.Module):
    """The mean of squares over dim 1 (positions), not the features: declined."""

    def __init__(self, hidden=64):
        super().__init__()
        self.norm = RMSNorm(hidden, dim=1)
        self.q = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        return self.q(self.norm(x))


class NormComputedWeight(nn.Module):
    """Llama's order with the norm weight computed in forward from a parameter w: `weight(w)`.
    1 + w folds as W·diag(1 + w) (the offset added in float32 at plan time); exp(w), neither a
    parameter nor one plus a constant, is declined."""

    def __init__(self, weight, hidden=64):
        super().__init__()
        self.weight = weight
        self.w = nn.Parameter(0.1 * torch.randn(hidden))
        self.q = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.q(self.weight(self.w) * h.to(dtype))


def exp_weight(w):
    return torch.exp(w)


def one_plus_weight(w):
    return 1.0 + w


class GemmaRMSNorm(nn.Module):
    """transformers' GemmaRMSNorm: the weight multiplies in float32, offset by one, then the cast."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


class GemmaNormQKV(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.norm = GemmaRMSNorm(hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden // 2, bias=False)
        self.v = nn.Linear(hidden, hidden // 2, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h), self.k(h), self.v(h)
