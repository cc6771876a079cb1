"""BERT-style embeddings, everything FACT leaves to PyTorch: word + learned absolute position +
token-type embeddings (nn.Embedding lookups), LayerNorm, dropout in eval. Inputs are token ids
and token-type ids; position ids come from a registered buffer sliced to T."""
import torch
import torch.nn as nn

BATCH = 32
SEQ_LEN = 512
VOCAB_SIZE = 30522
HIDDEN_SIZE = 1024
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "VOCAB_SIZE": 128, "HIDDEN_SIZE": 64,
                  "MAX_POSITIONS": 32, "TYPE_VOCAB_SIZE": 2}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_positions, type_vocab_size):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_positions, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False)

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        embeddings = self.word_embeddings(input_ids)
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


def get_inputs(dtype=torch.float32, device="cpu"):
    input_ids = torch.randint(1, VOCAB_SIZE, (BATCH, SEQ_LEN), device=device)
    token_type_ids = torch.zeros(BATCH, SEQ_LEN, dtype=torch.long, device=device)
    token_type_ids[:, SEQ_LEN // 2:] = 1  # sentence B is the second half
    return [input_ids, token_type_ids]


def get_init_inputs():
    return [VOCAB_SIZE, HIDDEN_SIZE, MAX_POSITIONS, TYPE_VOCAB_SIZE]
