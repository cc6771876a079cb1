"""transformers' GemmaDecoderLayer (Gemma-2B layer sizes: hidden 2048, intermediate 16384, 8
query heads and ONE KV head (multi-query) of dim 256, GeGLU with tanh GELU, RMSNorm with
(1 + weight)) with SDPA attention, over right-padded batches: the 2-D padding mask goes through
transformers' create_causal_mask, so SDPA gets a materialized 4-D mask."""
import torch
import torch.nn as nn
from transformers import GemmaConfig
from transformers.masking_utils import create_causal_mask
from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer, GemmaRotaryEmbedding

BATCH = 4
SEQ_LEN = 2048
HIDDEN_SIZE = 2048
INTERMEDIATE_SIZE = 16384
NUM_HEADS = 8
NUM_KV_HEADS = 1
HEAD_DIM = 256

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN_SIZE": 64, "INTERMEDIATE_SIZE": 256,
                  "NUM_HEADS": 2, "NUM_KV_HEADS": 1, "HEAD_DIM": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = GemmaConfig(
            hidden_size=HIDDEN_SIZE,
            intermediate_size=INTERMEDIATE_SIZE,
            num_attention_heads=NUM_HEADS,
            num_key_value_heads=NUM_KV_HEADS,
            head_dim=HEAD_DIM,
            num_hidden_layers=1,
            hidden_act="gelu_pytorch_tanh",
            attn_implementation="sdpa",
        )
        self.layer = GemmaDecoderLayer(self.config, layer_idx=0)
        self.rotary_emb = GemmaRotaryEmbedding(config=self.config)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states, attention_mask):
        b, t, _ = hidden_states.shape
        position_ids = torch.arange(t, device=hidden_states.device).unsqueeze(0).expand(b, -1)
        mask = create_causal_mask(config=self.config, inputs_embeds=hidden_states,
                                  attention_mask=attention_mask, past_key_values=None,
                                  position_ids=position_ids)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        return self.layer(hidden_states, attention_mask=mask, position_ids=position_ids,
                          position_embeddings=position_embeddings)


def get_inputs(dtype=torch.float32, device="cpu"):
    hidden_states = torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)
    attention_mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long, device=device)
    for i in range(1, BATCH):  # right padding; the first sequence is full length
        attention_mask[i, SEQ_LEN - (i * SEQ_LEN) // (2 * BATCH):] = 0
    return [hidden_states, attention_mask]


def get_init_inputs():
    return []
