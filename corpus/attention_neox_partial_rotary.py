"""GPT-NeoX / Pythia attention: the fused QKV output viewed per head as [b, t, heads, 3 * head_dim]
and split on the last dim (q, k, v interleaved per head, not per projection), rotary embedding on
the first quarter of each head (rotary_pct 0.25), head dim 80 (Pythia-2.8B: 32 x 80 = 2560),
causal via a tril buffer sliced to T and torch.where with finfo.min."""
import torch
import torch.nn as nn

BATCH = 4
SEQ_LEN = 2048
MAX_POSITIONS = 4096
HIDDEN = 2560
HEADS = 32

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "MAX_POSITIONS": 64, "HIDDEN": 128, "HEADS": 4}
DTYPES = ("float32", "bfloat16")
ROTARY_PCT = 0.25
ROTARY_BASE = 10000.0


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, hidden, heads, max_positions):
        super().__init__()
        self.heads = heads
        self.head_size = hidden // heads
        self.rotary_ndims = int(self.head_size * ROTARY_PCT)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))
                             .view(1, 1, max_positions, max_positions), persistent=False)
        inv_freq = 1.0 / (ROTARY_BASE ** (torch.arange(0, self.rotary_ndims, 2).float() / self.rotary_ndims))
        t = torch.arange(max_positions).float()
        emb = torch.cat([torch.outer(t, inv_freq)] * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, hidden_states):
        b, t, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(b, t, self.heads, 3 * self.head_size)
        query = qkv[..., : self.head_size].permute(0, 2, 1, 3)
        key = qkv[..., self.head_size: 2 * self.head_size].permute(0, 2, 1, 3)
        value = qkv[..., 2 * self.head_size:].permute(0, 2, 1, 3)

        cos = self.cos_cached[:, :, :t].to(query.dtype)
        sin = self.sin_cached[:, :, :t].to(query.dtype)
        q_rot, q_pass = query[..., : self.rotary_ndims], query[..., self.rotary_ndims:]
        k_rot, k_pass = key[..., : self.rotary_ndims], key[..., self.rotary_ndims:]
        query = torch.cat((q_rot * cos + rotate_half(q_rot) * sin, q_pass), dim=-1)
        key = torch.cat((k_rot * cos + rotate_half(k_rot) * sin, k_pass), dim=-1)

        attn_scores = torch.matmul(query, key.transpose(-1, -2)) / self.head_size ** 0.5
        causal_mask = self.bias[:, :, :t, :t]
        mask_value = torch.tensor(torch.finfo(attn_scores.dtype).min, dtype=attn_scores.dtype,
                                  device=attn_scores.device)
        attn_scores = torch.where(causal_mask, attn_scores, mask_value)
        attn_weights = nn.functional.softmax(attn_scores, dim=-1)
        attn_output = torch.matmul(attn_weights, value)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(b, t, -1)
        return self.dense(attn_output)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN, HEADS, MAX_POSITIONS]
