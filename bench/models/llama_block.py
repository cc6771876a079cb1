"""Llama-3-8B-style decoder block: RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU MLP, no biases.

Problem size: batch 4, sequence 2048 (four prefills of 2k-token prompts), hidden
4096, 32 query heads / 8 key-value heads of dim 128, MLP intermediate 14336. Attention is
written out (explicit causal mask + softmax, not SDPA) so FACT sees the matmuls; `sdpa_twin`
gives the same block with the weights shared and attention through
F.scaled_dot_product_attention (is_causal), the torch.compile baseline the Llama goal names.
At full size the weights are ~0.9 GB in float32: build it under `with torch.device("meta"):`
when only the graph is needed.

KernelBench-style: the module class plus get_inputs() / get_init_inputs().
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ_LEN = 4, 2048
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 4096, 32, 8, 128, 14336
ROPE_THETA, RMS_EPS = 500000.0, 1e-5


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = RMS_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, max_seq_len: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.use_sdpa = False  # sdpa_twin sets it: F.scaled_dot_product_attention(is_causal=True)
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)
        causal = torch.full((max_seq_len, max_seq_len), float("-inf")).triu(1)
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, _ = x.shape
        q = self.q_proj(x).view(batch, seq_len, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq_len, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq_len, self.kv_heads, self.head_dim).transpose(1, 2)
        cos = self.cos_cached[:seq_len].to(x.dtype)
        sin = self.sin_cached[:seq_len].to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        if self.use_sdpa:
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (self.head_dim ** -0.5)
            scores = scores + self.causal_mask[:seq_len, :seq_len].to(scores.dtype)
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            attended = probs @ v
        out = attended.transpose(1, 2).reshape(batch, seq_len, self.heads * self.head_dim)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderBlock(nn.Module):
    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, kv_heads: int = KV_HEADS,
                 head_dim: int = HEAD_DIM, intermediate: int = INTERMEDIATE,
                 max_seq_len: int = SEQ_LEN):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaAttention(hidden, heads, kv_heads, head_dim, max_seq_len)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


def sdpa_twin(model: nn.Module) -> nn.Module:
    """A copy of `model` (same weights) whose attention runs F.scaled_dot_product_attention with
    is_causal=True (PyTorch picks its fastest backend: cuDNN or FlashAttention on Hopper), as
    `transformers` runs Llama with attn_implementation="sdpa". The benchmarks' torch.compile
    baseline for this block (patterns/attention/bench_blocks.py: torch_compile_sdpa)."""
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, LlamaAttention):
            module.use_sdpa = True
    return twin


def get_inputs(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return []
