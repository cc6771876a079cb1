"""transformers' MistralDecoderLayer (Mistral-7B-v0.1 layer sizes: hidden 4096, intermediate
14336, 32 / 8 heads of 128, sliding window 4096) with EAGER attention (repeat_kv, matmul, additive
float mask, softmax in float32). The sliding-window causal mask is built in forward with
transformers' create_sliding_window_causal_mask (window shorter than T on the CPU test)."""
import torch
import torch.nn as nn
from transformers import MistralConfig
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.mistral.modeling_mistral import MistralDecoderLayer, MistralRotaryEmbedding

BATCH = 2
SEQ_LEN = 2048
HIDDEN_SIZE = 4096
INTERMEDIATE_SIZE = 14336
NUM_HEADS = 32
NUM_KV_HEADS = 8
SLIDING_WINDOW = 4096
MAX_POSITIONS = 32768

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 32, "HIDDEN_SIZE": 64, "INTERMEDIATE_SIZE": 224,
                  "NUM_HEADS": 4, "NUM_KV_HEADS": 1, "SLIDING_WINDOW": 24, "MAX_POSITIONS": 128}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = MistralConfig(
            hidden_size=HIDDEN_SIZE,
            intermediate_size=INTERMEDIATE_SIZE,
            num_attention_heads=NUM_HEADS,
            num_key_value_heads=NUM_KV_HEADS,
            num_hidden_layers=1,
            max_position_embeddings=MAX_POSITIONS,
            sliding_window=SLIDING_WINDOW,
            rms_norm_eps=1e-5,
            attn_implementation="eager",
        )
        self.decoder_layer = MistralDecoderLayer(self.config, layer_idx=0)
        self.rotary_emb = MistralRotaryEmbedding(config=self.config)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states):
        batch, seq_len, _ = hidden_states.shape
        position_ids = torch.arange(seq_len, device=hidden_states.device)[None, :].expand(batch, -1)
        mask = create_sliding_window_causal_mask(config=self.config, inputs_embeds=hidden_states,
                                                 attention_mask=None, past_key_values=None,
                                                 position_ids=position_ids)
        cos_sin = self.rotary_emb(hidden_states, position_ids)
        return self.decoder_layer(hidden_states, attention_mask=mask, position_ids=position_ids,
                                  position_embeddings=cos_sin)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return []
