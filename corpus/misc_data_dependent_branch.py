"""Data-dependent Python control flow, NOT exportable on purpose (EXPORTABLE = False): the
attention takes the cheap `is_causal=True` SDPA path when the padding mask has no zeros
(`if attention_mask.all():`) and builds a masked path otherwise, as some inference code does.
torch.export cannot trace the branch; FACT has to fall back (dynamo) or decline, not crash.
Projections and MLP around it are ordinary GEMMs."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ_LEN = 1024
HIDDEN = 2048
HEADS = 16

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN": 64, "HEADS": 2}
DTYPES = ("float32", "bfloat16")
EXPORTABLE = False


class Model(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x, attention_mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if attention_mask.all():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            keep = causal[None, None] & attention_mask[:, None, None, :].bool()
            keep = keep | ~keep.any(dim=-1, keepdim=True)  # fully padded rows attend everywhere
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(x)))


def get_inputs(dtype=torch.float32, device="cpu"):
    x = torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)
    attention_mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long, device=device)
    attention_mask[0, : SEQ_LEN // 4] = 0  # one left-padded sequence: the masked branch runs
    return [x, attention_mask]


def get_init_inputs():
    return [HIDDEN, HEADS]
