"""Causal attention over left-padded batches, masked with `torch.finfo(dtype).min` (so a fully
padded query row softmaxes to uniform instead of NaN): a [batch, seq] 0/1 padding mask input
combined with the causal mask, head dim 80 (Phi-2: 32 heads x 80 = 2560), q/k/v with bias."""
import torch
import torch.nn as nn

BATCH = 8
SEQ_LEN = 2048
HIDDEN = 2560
HEADS = 32

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 32, "HIDDEN": 64, "HEADS": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, hidden_states, attention_mask):
        b, t, c = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, t, self.heads, self.head_dim).transpose(1, 2)

        causal = torch.ones(t, t, dtype=torch.bool, device=hidden_states.device).tril()
        allowed = causal[None, None, :, :] & attention_mask[:, None, None, :].bool()

        scores = torch.matmul(q, k.transpose(-1, -2)) / self.head_dim ** 0.5
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, c)
        return self.dense(out)


def get_inputs(dtype=torch.float32, device="cpu"):
    hidden_states = torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)
    # left padding: sequence i starts (i * SEQ_LEN // 8) % (SEQ_LEN // 2) tokens in
    attention_mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long, device=device)
    for i in range(BATCH):
        attention_mask[i, : (i * SEQ_LEN // 8) % (SEQ_LEN // 2)] = 0
    return [hidden_states, attention_mask]


def get_init_inputs():
    return [HIDDEN, HEADS]
