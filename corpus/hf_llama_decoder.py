"""transformers' LlamaDecoderLayer (Llama-3-8B layer sizes: hidden 4096, intermediate 14336,
32 query / 8 KV heads of 128, rope theta 500000) with SDPA attention, from a config (no weights
downloaded). Rotary cos/sin come from LlamaRotaryEmbedding and the mask from transformers'
create_causal_mask in forward, as LlamaModel does (for SDPA it returns None: is_causal)."""
import torch
import torch.nn as nn
from transformers import LlamaConfig
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

BATCH = 2
SEQ_LEN = 2048
HIDDEN_SIZE = 4096
INTERMEDIATE_SIZE = 14336
NUM_HEADS = 32
NUM_KV_HEADS = 8
MAX_POSITIONS = 8192

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN_SIZE": 64, "INTERMEDIATE_SIZE": 224,
                  "NUM_HEADS": 4, "NUM_KV_HEADS": 2, "MAX_POSITIONS": 64}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = LlamaConfig(
            hidden_size=HIDDEN_SIZE,
            intermediate_size=INTERMEDIATE_SIZE,
            num_attention_heads=NUM_HEADS,
            num_key_value_heads=NUM_KV_HEADS,
            num_hidden_layers=1,
            max_position_embeddings=MAX_POSITIONS,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            attn_implementation="sdpa",
        )
        self.layer = LlamaDecoderLayer(self.config, layer_idx=0)
        self.rotary_emb = LlamaRotaryEmbedding(config=self.config)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states):
        batch, seq_len, _ = hidden_states.shape
        position_ids = torch.arange(seq_len, device=hidden_states.device).unsqueeze(0).expand(batch, -1)
        causal_mask = create_causal_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=None,
                                         past_key_values=None, position_ids=position_ids)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        return self.layer(hidden_states, attention_mask=causal_mask, position_ids=position_ids,
                          position_embeddings=position_embeddings)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return []
