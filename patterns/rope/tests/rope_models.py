"""Small projection + rotary-embedding models for the rope pattern's tests (discovery graphs
and CPU composition): the rotate-half form of `transformers` (Llama / Mistral / Qwen2, with
and without the q bias), GPT-J's interleaved form, and shapes the rule must decline."""
import torch
import torch.nn as nn

THETA = 10000.0


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def tables(head_dim, positions, rotary_dim=None):
    rotary_dim = rotary_dim or head_dim
    inv_freq = 1.0 / (THETA ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    angles = torch.outer(torch.arange(positions, dtype=torch.float32), inv_freq)
    return angles


class RotateHalf(nn.Module):
    """q = rope(view(linear(x)).transpose(1, 2)) with buffer tables sliced to T and cast (the
    bench Llama block's attention); `bias` gives q_proj a bias (Qwen2)."""

    def __init__(self, hidden=64, heads=4, head_dim=16, max_positions=32, bias=False, transpose=True):
        super().__init__()
        self.heads, self.head_dim, self.transpose = heads, head_dim, transpose
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        angles = tables(head_dim, max_positions)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        cos = self.cos_cached[:t].to(x.dtype)
        sin = self.sin_cached[:t].to(x.dtype)
        if self.transpose:
            q = q.transpose(1, 2)
        else:
            cos, sin = cos[:, None], sin[:, None]
        q = q * cos + rotate_half(q) * sin
        return q


class Interleaved(nn.Module):
    """GPT-J: q = view(linear(x)) [B, T, H, hd], rotate_every_two, tables computed in forward
    and repeat_interleave'd to [1, T, 1, hd]."""

    def __init__(self, hidden=64, heads=4, head_dim=16):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        inv_freq = 1.0 / (THETA ** (torch.arange(0, self.head_dim, 2, device=x.device, dtype=torch.float32) / self.head_dim))
        sinusoid = torch.einsum("i,j->ij", torch.arange(t, device=x.device, dtype=torch.float32), inv_freq)
        sin, cos = sinusoid.sin()[None].to(x.dtype), sinusoid.cos()[None].to(x.dtype)
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        return (q * cos) + (rotate_every_two(q) * sin)


class TablePerHead(nn.Module):
    """Declined: the cos / sin tables vary over the heads ([H, T, hd])."""

    def __init__(self, hidden=64, heads=4, head_dim=16, seq=16):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.register_buffer("cos_t", torch.randn(heads, seq, head_dim), persistent=False)
        self.register_buffer("sin_t", torch.randn(heads, seq, head_dim), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        return q * self.cos_t.to(x.dtype) + rotate_half(q) * self.sin_t.to(x.dtype)


class NoGemm(nn.Module):
    """No match: the rotation of a model input, not of a projection."""

    def __init__(self, head_dim=16, max_positions=32):
        super().__init__()
        angles = tables(head_dim, max_positions)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)

    def forward(self, q):
        t = q.shape[-2]
        cos = self.cos_cached[:t].to(q.dtype)
        sin = self.sin_cached[:t].to(q.dtype)
        return q * cos + rotate_half(q) * sin


class PartialRotary(nn.Module):
    """Declined with its reason: NeoX / Phi partial rotary (the first `rotary_dim` of each head
    rotated, the rest passed through)."""

    def __init__(self, hidden=64, heads=4, head_dim=16, rotary_dim=8, max_positions=32):
        super().__init__()
        self.heads, self.head_dim, self.rotary_dim = heads, head_dim, rotary_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        angles = tables(head_dim, max_positions, rotary_dim)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        cos = self.cos_cached[:t].to(x.dtype)
        sin = self.sin_cached[:t].to(x.dtype)
        q_rot, q_pass = q[..., : self.rotary_dim], q[..., self.rotary_dim:]
        return torch.cat((q_rot * cos + rotate_half(q_rot) * sin, q_pass), dim=-1)


class PerSequenceTables(nn.Module):
    """`transformers`' LlamaRotaryEmbedding form: cos / sin computed in forward from
    position_ids [B, T] (inv_freq @ positions, cat, cos / sin, cast), [B, T, hd] unsqueezed to
    [B, 1, T, hd]: one table per sequence (here each sequence starts at its own offset)."""

    def __init__(self, hidden=64, heads=4, head_dim=16):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        inv_freq = 1.0 / (THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        position_ids = torch.arange(t, device=x.device)[None] + torch.arange(b, device=x.device)[:, None] * 3
        freqs = (self.inv_freq[None, :, None].float().expand(b, -1, 1) @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype).unsqueeze(1), emb.sin().to(x.dtype).unsqueeze(1)
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        return (q * cos) + (rotate_half(q) * sin)
