"""transformers' Phi3DecoderLayer (Phi-3-mini-4k layer sizes: hidden 3072, intermediate 8192,
32 heads of 96 (no GQA), FUSED qkv_proj and gate_up_proj, sliding window 2047) with EAGER
attention; the mask comes from create_sliding_window_causal_mask as Phi3Model builds it (the
window is one shorter than T, so it differs from plain causal)."""
import torch
import torch.nn as nn
from transformers import Phi3Config
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer, Phi3RotaryEmbedding

BATCH = 4
SEQ_LEN = 2048
HIDDEN_SIZE = 3072
INTERMEDIATE_SIZE = 8192
NUM_HEADS = 32
SLIDING_WINDOW = 2047
MAX_POSITIONS = 4096

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN_SIZE": 96, "INTERMEDIATE_SIZE": 128,
                  "NUM_HEADS": 3, "SLIDING_WINDOW": 15, "MAX_POSITIONS": 64}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Phi3Config(
            hidden_size=HIDDEN_SIZE,
            intermediate_size=INTERMEDIATE_SIZE,
            num_attention_heads=NUM_HEADS,
            num_key_value_heads=NUM_HEADS,
            num_hidden_layers=1,
            max_position_embeddings=MAX_POSITIONS,
            original_max_position_embeddings=MAX_POSITIONS,
            sliding_window=SLIDING_WINDOW,
            rms_norm_eps=1e-5,
            pad_token_id=0,
            attn_implementation="eager",
        )
        self.layer = Phi3DecoderLayer(self.config, layer_idx=0)
        self.rotary_emb = Phi3RotaryEmbedding(config=self.config)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states):
        b, t, _ = hidden_states.shape
        position_ids = torch.arange(t, device=hidden_states.device).unsqueeze(0).expand(b, -1)
        attention_mask = create_sliding_window_causal_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=None,
            past_key_values=None, position_ids=position_ids)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        return self.layer(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                          position_embeddings=position_embeddings)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return []
