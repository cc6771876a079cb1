"""Rotary position embedding, rotate-half form (Llama / NeoX): cos/sin tables precomputed in
__init__ for MAX_POSITIONS as buffers, sliced to T, applied to q and k laid out [batch, heads,
seq, head_dim]; no GEMM. Returns q and k stacked."""
import torch
import torch.nn as nn

BATCH = 4
HEADS = 32
SEQ_LEN = 2048
HEAD_DIM = 128
MAX_POSITIONS = 4096

CPU_TEST_SIZES = {"BATCH": 2, "HEADS": 2, "SEQ_LEN": 16, "HEAD_DIM": 16, "MAX_POSITIONS": 32}
DTYPES = ("float32", "bfloat16")
ROPE_THETA = 10000.0


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Model(nn.Module):
    def __init__(self, head_dim, max_positions):
        super().__init__()
        inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        t = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, q, k):
        seq_len = q.shape[-2]
        cos = self.cos_cached[:seq_len].to(dtype=q.dtype)[None, None]
        sin = self.sin_cached[:seq_len].to(dtype=q.dtype)[None, None]
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return torch.stack((q, k))


def get_inputs(dtype=torch.float32, device="cpu"):
    q = torch.randn(BATCH, HEADS, SEQ_LEN, HEAD_DIM, dtype=dtype, device=device)
    k = torch.randn(BATCH, HEADS, SEQ_LEN, HEAD_DIM, dtype=dtype, device=device)
    return [q, k]


def get_init_inputs():
    return [HEAD_DIM, MAX_POSITIONS]
