"""transformers' GPT2Block (GPT-2 XL layer sizes: n_embd 1600, 25 heads of 64, inner 6400) with
EAGER attention: Conv1D weights stored (in, out) and applied with addmm, the fused c_attn split
into heads, gelu_new. The causal mask is transformers' create_causal_mask (a materialized
additive float mask for eager)."""
import torch
import torch.nn as nn
from transformers import GPT2Config
from transformers.masking_utils import create_causal_mask
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

BATCH = 8
SEQ_LEN = 1024
N_EMBD = 1600
N_HEAD = 25
N_POSITIONS = 1024

CPU_TEST_SIZES = {"BATCH": 2, "SEQ_LEN": 16, "N_EMBD": 64, "N_HEAD": 2, "N_POSITIONS": 32}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = GPT2Config(
            n_embd=N_EMBD,
            n_head=N_HEAD,
            n_layer=1,
            n_positions=N_POSITIONS,
            activation_function="gelu_new",
            attn_implementation="eager",
        )
        self.block = GPT2Block(self.config, layer_idx=0)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, hidden_states):
        mask = create_causal_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=None,
                                  past_key_values=None)
        return self.block(hidden_states, attention_mask=mask)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, SEQ_LEN, N_EMBD, dtype=dtype, device=device)]


def get_init_inputs():
    return []
