"""Tied and shared weights: one Linear applied twice (ALBERT-style layer sharing) and the token
embedding matrix reused as the LM head (`F.linear(h, self.embed.weight)`). Input is token ids."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
SEQ_LEN = 1024
VOCAB = 32000
HIDDEN = 4096
REPEATS = 2

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "VOCAB": 256, "HIDDEN": 64, "REPEATS": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, vocab, hidden, repeats):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        nn.init.normal_(self.embed.weight, std=hidden ** -0.5)
        self.shared = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.repeats = repeats

    def forward(self, input_ids):
        h = self.embed(input_ids)
        for _ in range(self.repeats):
            h = h + torch.tanh(self.shared(h))
        return F.linear(self.norm(h), self.embed.weight)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN), device=device)]


def get_init_inputs():
    return [VOCAB, HIDDEN, REPEATS]
