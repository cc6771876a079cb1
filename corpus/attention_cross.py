"""Cross-attention as in a diffusion UNet / encoder-decoder: queries from the image tokens, keys
and values from a text context of another length and width (SDXL: 20 heads x 64, context 77 x
2048), no mask, SDPA; the q/kv sequence lengths differ."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
QUERY_LEN = 1024
CONTEXT_LEN = 77
QUERY_DIM = 1280
CONTEXT_DIM = 2048
HEADS = 20

CPU_TEST_SIZES = {"BATCH": 2, "QUERY_LEN": 32, "CONTEXT_LEN": 16, "QUERY_DIM": 64,
                  "CONTEXT_DIM": 96, "HEADS": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, query_dim, context_dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(query_dim, query_dim, bias=False)
        self.to_k = nn.Linear(context_dim, query_dim, bias=False)
        self.to_v = nn.Linear(context_dim, query_dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(query_dim, query_dim), nn.Dropout(0.0)])

    def forward(self, hidden_states, encoder_hidden_states):
        batch_size = hidden_states.shape[0]
        query = self.to_q(hidden_states)
        key = self.to_k(encoder_hidden_states)
        value = self.to_v(encoder_hidden_states)
        head_dim = key.shape[-1] // self.heads
        query = query.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        hidden_states = F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, is_causal=False)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, self.heads * head_dim)
        hidden_states = self.to_out[0](hidden_states)
        return self.to_out[1](hidden_states)


def get_inputs(dtype=torch.float32, device="cpu"):
    hidden_states = torch.randn(BATCH, QUERY_LEN, QUERY_DIM, dtype=dtype, device=device)
    context = torch.randn(BATCH, CONTEXT_LEN, CONTEXT_DIM, dtype=dtype, device=device)
    return [hidden_states, context]


def get_init_inputs():
    return [QUERY_DIM, CONTEXT_DIM, HEADS]
