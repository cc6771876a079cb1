"""Rotary position embedding, interleaved (adjacent pairs) forms on [batch, seq, heads, head_dim]:
GPT-J's `rotate_every_two` (stack + flatten) on q, with sin/cos computed in forward, and Meta
Llama's complex form (`view_as_complex`, multiply by `torch.polar` frequencies, `view_as_real`)
on k. No GEMM but the angle table's outer product (einsum "i,j->ij", K = 1). The complex frequencies are computed in forward, not stored: a complex buffer
would lose its imaginary part under `model.to(torch.bfloat16)`."""
import torch
import torch.nn as nn

BATCH = 4
SEQ_LEN = 2048
HEADS = 16
HEAD_DIM = 256

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HEADS": 2, "HEAD_DIM": 32}
DTYPES = ("float32", "bfloat16")
BASE = 10000.0


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')


def apply_rotary_pos_emb_gptj(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


def apply_rotary_emb_complex(x, freqs_cis):
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, x_.shape[1], 1, x_.shape[-1])
    return torch.view_as_real(x_ * freqs_cis).flatten(3).type_as(x)


class Model(nn.Module):
    def forward(self, q, k):
        b, t, _, d = q.shape
        inv_freq = 1.0 / (BASE ** (torch.arange(0, d, 2, device=q.device, dtype=torch.float32) / d))
        positions = torch.arange(t, device=q.device, dtype=torch.float32)
        sinusoid = torch.einsum("i,j->ij", positions, inv_freq)            # [t, d/2]
        sin, cos = sinusoid.sin()[None].to(q.dtype), sinusoid.cos()[None].to(q.dtype)
        q = apply_rotary_pos_emb_gptj(q, sin, cos)
        freqs_cis = torch.polar(torch.ones_like(sinusoid), sinusoid)       # complex64 [t, d/2]
        k = apply_rotary_emb_complex(k, freqs_cis)
        return torch.cat((q, k), dim=2)


def get_inputs(dtype=torch.float32, device="cpu"):
    q = torch.randn(BATCH, SEQ_LEN, HEADS, HEAD_DIM, dtype=dtype, device=device)
    k = torch.randn(BATCH, SEQ_LEN, HEADS, HEAD_DIM, dtype=dtype, device=device)
    return [q, k]


def get_init_inputs():
    return []
