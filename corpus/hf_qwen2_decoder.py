"""transformers' Qwen2DecoderLayer (Qwen2-7B layer sizes: hidden 3584, intermediate 18944,
28 query / 4 KV heads of 128, q/k/v WITH bias, rope theta 1e6) with SDPA attention. The causal
mask is an explicit float mask the wrapper keeps as a buffer and slices to T (as a user who
wraps one layer would), so SDPA gets attn_mask rather than is_causal."""
import torch
import torch.nn as nn
from transformers import Qwen2Config
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

BATCH = 2
SEQ_LEN = 2048
HIDDEN_SIZE = 3584
INTERMEDIATE_SIZE = 18944
NUM_HEADS = 28
NUM_KV_HEADS = 4
MAX_LEN = 4096

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "HIDDEN_SIZE": 128, "INTERMEDIATE_SIZE": 256,
                  "NUM_HEADS": 4, "NUM_KV_HEADS": 2, "MAX_LEN": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        config = Qwen2Config(
            hidden_size=HIDDEN_SIZE,
            intermediate_size=INTERMEDIATE_SIZE,
            num_attention_heads=NUM_HEADS,
            num_key_value_heads=NUM_KV_HEADS,
            num_hidden_layers=1,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-6,
            attn_implementation="sdpa",
        )
        self.layer = Qwen2DecoderLayer(config, layer_idx=0)
        self.rotary_emb = Qwen2RotaryEmbedding(config=config)
        mask = torch.full((MAX_LEN, MAX_LEN), float("-inf")).triu(1)
        self.register_buffer("causal_mask", mask[None, None], persistent=False)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states):
        seq_len = hidden_states.shape[1]
        position_ids = torch.arange(seq_len, device=hidden_states.device).unsqueeze(0)
        mask = self.causal_mask[:, :, :seq_len, :seq_len].to(hidden_states.dtype)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        return self.layer(hidden_states, attention_mask=mask, position_ids=position_ids,
                          position_embeddings=position_embeddings)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return []
