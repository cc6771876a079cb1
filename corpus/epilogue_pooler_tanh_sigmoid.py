"""BERT's pooler and a multi-label head: the first token's hidden state (a strided slice
`hidden[:, 0]`) -> Linear -> tanh -> Linear -> sigmoid."""
import torch
import torch.nn as nn

BATCH = 4096
SEQ_LEN = 128
HIDDEN = 1024
NUM_LABELS = 512

CPU_TEST_SIZES = {"BATCH": 8, "SEQ_LEN": 16, "HIDDEN": 64, "NUM_LABELS": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self, hidden, num_labels):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation = nn.Tanh()
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(self, hidden_states):
        first_token_tensor = hidden_states[:, 0]
        pooled_output = self.activation(self.dense(first_token_tensor))
        return torch.sigmoid(self.classifier(pooled_output))


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN, dtype=dtype, device=device)]


def get_init_inputs():
    return [HIDDEN, NUM_LABELS]
