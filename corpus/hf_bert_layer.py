"""transformers' BertLayer (bert-base sizes: hidden 768, 12 heads of 64, intermediate 3072, erf
GELU, post-LayerNorm) with EAGER attention: bidirectional, over right-padded batches whose 2-D
attention mask goes through transformers' create_bidirectional_mask."""
import torch
import torch.nn as nn
from transformers import BertConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer

BATCH = 32
SEQ_LEN = 512
HIDDEN_SIZE = 768
NUM_HEADS = 12
INTERMEDIATE_SIZE = 3072

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN_SIZE": 64, "NUM_HEADS": 4, "INTERMEDIATE_SIZE": 256}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = BertConfig(
            hidden_size=HIDDEN_SIZE,
            num_attention_heads=NUM_HEADS,
            intermediate_size=INTERMEDIATE_SIZE,
            num_hidden_layers=1,
            hidden_act="gelu",
            attn_implementation="eager",
        )
        self.layer = BertLayer(self.config)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states, attention_mask):
        extended_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                                  attention_mask=attention_mask)
        return self.layer(hidden_states, attention_mask=extended_mask)


def get_inputs(dtype=torch.float32, device="cpu"):
    hidden_states = torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)
    lengths = [SEQ_LEN - (i * SEQ_LEN) // (2 * BATCH) for i in range(BATCH)]
    attention_mask = torch.zeros(BATCH, SEQ_LEN, dtype=torch.long, device=device)
    for i, n in enumerate(lengths):
        attention_mask[i, :n] = 1
    return [hidden_states, attention_mask]


def get_init_inputs():
    return []
