"""Grouped-query attention with transformers' `repeat_kv` (`[:, :, None].expand(...)` then
`reshape`), TinyLlama-1.1B's shape (32 query heads, 4 KV heads, head dim 64), an additive causal
mask from `torch.finfo(dtype).min`, eager matmuls."""
import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 2048
HIDDEN = 2048
NUM_HEADS = 32
NUM_KV_HEADS = 4

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 32, "HIDDEN": 128, "NUM_HEADS": 4, "NUM_KV_HEADS": 2}
DTYPES = ("float32", "bfloat16")


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Model(nn.Module):
    def __init__(self, hidden, num_heads, num_kv_heads):
        super().__init__()
        self.num_heads = num_heads
        self.num_key_value_heads = num_kv_heads
        self.num_key_value_groups = num_heads // num_kv_heads
        self.head_dim = hidden // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden, bias=False)

    def forward(self, hidden_states):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        seq_len = hidden_states.shape[1]
        min_value = torch.finfo(hidden_states.dtype).min
        causal_mask = torch.full((seq_len, seq_len), min_value, dtype=hidden_states.dtype,
                                 device=hidden_states.device).triu(1)[None, None]

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights + causal_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().reshape(*input_shape, -1)
        return self.o_proj(attn_output)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN, NUM_HEADS, NUM_KV_HEADS]
