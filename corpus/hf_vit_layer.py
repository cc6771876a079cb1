"""transformers' ViTLayer (ViT-B/16 at 224 px: hidden 768, 12 heads of 64, intermediate 3072,
pre-LayerNorm) with SDPA attention, no mask. The sequence is patches + 1 class token: 197 at full
size and deliberately odd (17) on the CPU test too."""
import torch
import torch.nn as nn
from transformers import ViTConfig
from transformers.models.vit.modeling_vit import ViTLayer

BATCH = 64
NUM_PATCHES = 196
HIDDEN_SIZE = 768
NUM_HEADS = 12
INTERMEDIATE_SIZE = 3072

CPU_TEST_SIZES = {"BATCH": 2, "NUM_PATCHES": 16, "HIDDEN_SIZE": 64, "NUM_HEADS": 2, "INTERMEDIATE_SIZE": 128}
DTYPES = ("float32", "bfloat16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        config = ViTConfig(
            hidden_size=HIDDEN_SIZE,
            num_attention_heads=NUM_HEADS,
            intermediate_size=INTERMEDIATE_SIZE,
            num_hidden_layers=1,
            attn_implementation="sdpa",
        )
        self.layer = ViTLayer(config)
        self.eval()  # inference: dropout off whoever builds it

    def forward(self, embeddings):
        return self.layer(embeddings)


def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(BATCH, NUM_PATCHES + 1, HIDDEN_SIZE, dtype=dtype, device=device)]


def get_init_inputs():
    return []
