"""Whole models from `transformers` and `torchvision` configs, at small CPU sizes: every layer,
the embeddings and the heads, random weights (no download). tests/python/test_whole_models_cpu.py
runs FACT on them; like the rest of corpus/ this file imports nothing from `fact`.

Not a conformance corpus file (its name has no `<category>_` prefix, so the corpus runs and
checks do not collect it): these are whole models, built from configs the way their users build
them, not one block written to the corpus convention.

`MODELS` maps a name to a `WholeModel`: `build()` returns the model in float32, `eval()` mode,
from a fixed seed (cast it for another dtype), `inputs(batch, seed)` a fresh example (token ids,
a padding mask, pixels in float32: the caller casts floating inputs), `outputs(out)` the named
output tensors to compare (logits, last_hidden_state, ...). Sizes: 2 layers, head dim 64 (the
attention kernels' head dims), hidden 128-256, 16-64 tokens; vocabularies are the real ones
(GPT-2's 50257, Llama's 32000, BERT's 30522): the LM head is most of such a model's FLOPs.
The `heavy` entries are larger variants (4 layers, hidden 256-512, 64 tokens, batch 4).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch


@dataclasses.dataclass(frozen=True)
class WholeModel:
    name: str
    what: str                                        # one line: the model and its sizes
    build: Callable[[], torch.nn.Module]             # float32, eval(), seeded
    inputs: Callable[[int, int], tuple]              # (batch, seed) -> forward's arguments
    outputs: Callable[[Any], dict[str, torch.Tensor]]
    requires: str = "transformers"                   # the package the model comes from
    batch: int = 2                                   # the example's batch size
    heavy: bool = False                              # a larger variant (the tests mark it slow)


def _seeded(make: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    torch.manual_seed(0)
    return make().eval()


def _fields(*names: str) -> Callable[[Any], dict[str, torch.Tensor]]:
    """A transformers ModelOutput's named tensors."""
    return lambda out: {name: getattr(out, name) for name in names}


def _tensor(out: Any) -> dict[str, torch.Tensor]:
    return {"output": out}


def _token_ids(vocab: int, seq: int) -> Callable[[int, int], tuple]:
    def make(batch: int, seed: int) -> tuple:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randint(0, vocab, (batch, seq), generator=generator),)
    return make


def _pixels(channels: int, size: int) -> Callable[[int, int], tuple]:
    def make(batch: int, seed: int) -> tuple:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(batch, channels, size, size, generator=generator),)
    return make


# --------------------------------------------------------------------------------------------
# transformers


GPT2 = dict(vocab_size=50257, n_positions=64, n_embd=128, n_layer=2, n_head=2, seq=32)


GPT2_HEAVY = dict(GPT2, n_positions=128, n_embd=256, n_layer=4, n_head=4, seq=64)


def _gpt2(sizes: dict = GPT2) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=sizes["vocab_size"], n_positions=sizes["n_positions"],
                        n_embd=sizes["n_embd"], n_layer=sizes["n_layer"], n_head=sizes["n_head"],
                        use_cache=False, attn_implementation="sdpa")
    return GPT2LMHeadModel(config)   # LM head tied to the token embedding


LLAMA = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, seq=32)


LLAMA_HEAVY = dict(LLAMA, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=2, seq=64)


def _llama(sizes: dict = LLAMA) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=sizes["vocab_size"], hidden_size=sizes["hidden_size"],
                         intermediate_size=sizes["intermediate_size"],
                         num_hidden_layers=sizes["num_hidden_layers"],
                         num_attention_heads=sizes["num_attention_heads"],
                         num_key_value_heads=sizes["num_key_value_heads"],
                         max_position_embeddings=sizes["max_position_embeddings"],
                         rms_norm_eps=1e-5, use_cache=False, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config)


BERT = dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=512, max_position_embeddings=64, seq=32)


def _bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel
    config = BertConfig(vocab_size=BERT["vocab_size"], hidden_size=BERT["hidden_size"],
                        num_hidden_layers=BERT["num_hidden_layers"],
                        num_attention_heads=BERT["num_attention_heads"],
                        intermediate_size=BERT["intermediate_size"],
                        max_position_embeddings=BERT["max_position_embeddings"],
                        attn_implementation="sdpa")
    return BertModel(config, add_pooling_layer=True)


def _bert_inputs(batch: int, seed: int) -> tuple:
    """Token ids, a padding mask (row i keeps seq - 3 i tokens, at least half), token types
    (the second half of each row is segment 1)."""
    seq = BERT["seq"]
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, BERT["vocab_size"], (batch, seq), generator=generator)
    lengths = [max(seq // 2, seq - 3 * ((i + seed) % 4)) for i in range(batch)]
    mask = torch.zeros(batch, seq, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    types = torch.zeros(batch, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    return ids, mask, types


VIT = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=128, num_hidden_layers=2,
           num_attention_heads=2, intermediate_size=512, num_labels=1000)


def _vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification
    config = ViTConfig(image_size=VIT["image_size"], patch_size=VIT["patch_size"],
                       num_channels=VIT["num_channels"], hidden_size=VIT["hidden_size"],
                       num_hidden_layers=VIT["num_hidden_layers"],
                       num_attention_heads=VIT["num_attention_heads"],
                       intermediate_size=VIT["intermediate_size"], num_labels=VIT["num_labels"],
                       attn_implementation="sdpa")
    return ViTForImageClassification(config)


# --------------------------------------------------------------------------------------------
# torchvision


TV_VIT = dict(image_size=64, patch_size=8, num_layers=2, num_heads=2, hidden_dim=128, mlp_dim=512,
              num_classes=1000)


def _tv_vit() -> torch.nn.Module:
    """vit_b_16's architecture (torchvision's VisionTransformer: conv patchify, class token,
    nn.MultiheadAttention, MLP, head) at a reduced size: vit_b_16() fixes the patch size and
    depth, so the class is built directly."""
    from torchvision.models.vision_transformer import VisionTransformer
    model = VisionTransformer(**TV_VIT)
    # torchvision zero-initializes the classification head (a fresh model's logits are all 0):
    # random weights there, as in a trained model, or the output would test nothing.
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    return model


RESNET = dict(image_size=64, num_classes=1000)


def _resnet18() -> torch.nn.Module:
    from torchvision.models import resnet18
    return resnet18(weights=None, num_classes=RESNET["num_classes"])


MODELS: dict[str, WholeModel] = {m.name: m for m in [
    WholeModel("gpt2_lm", "GPT2LMHeadModel: 2 layers, n_embd 128, 2 heads of 64, vocab 50257, "
               "seq 32, tied LM head, SDPA",
               lambda: _seeded(_gpt2), _token_ids(GPT2["vocab_size"], GPT2["seq"]),
               _fields("logits")),
    WholeModel("llama_causal_lm", "LlamaForCausalLM: 2 layers, hidden 256, 4 query / 2 KV heads "
               "of 64 (GQA), SwiGLU 688, vocab 32000, seq 32, SDPA",
               lambda: _seeded(_llama), _token_ids(LLAMA["vocab_size"], LLAMA["seq"]),
               _fields("logits")),
    WholeModel("gpt2_lm_heavy", "GPT2LMHeadModel: 4 layers, n_embd 256, 4 heads of 64, "
               "vocab 50257, seq 64, batch 4",
               lambda: _seeded(lambda: _gpt2(GPT2_HEAVY)),
               _token_ids(GPT2_HEAVY["vocab_size"], GPT2_HEAVY["seq"]), _fields("logits"),
               batch=4, heavy=True),
    WholeModel("llama_causal_lm_heavy", "LlamaForCausalLM: 4 layers, hidden 512, 8 query / 2 KV "
               "heads of 64, SwiGLU 1376, vocab 32000, seq 64, batch 4",
               lambda: _seeded(lambda: _llama(LLAMA_HEAVY)),
               _token_ids(LLAMA_HEAVY["vocab_size"], LLAMA_HEAVY["seq"]), _fields("logits"),
               batch=4, heavy=True),
    WholeModel("bert_pooler", "BertModel with pooler: 2 layers, hidden 128, 2 heads of 64, "
               "vocab 30522, seq 32, padding mask + token types, SDPA",
               lambda: _seeded(_bert), _bert_inputs,
               _fields("last_hidden_state", "pooler_output")),
    WholeModel("vit_classifier", "ViTForImageClassification: 32x32 images, patch 8 (17 tokens), "
               "2 layers, hidden 128, 2 heads of 64, 1000 labels, SDPA",
               lambda: _seeded(_vit), _pixels(VIT["num_channels"], VIT["image_size"]),
               _fields("logits")),
    WholeModel("torchvision_vit", "torchvision VisionTransformer (vit_b_16's architecture): "
               "64x64 images, patch 8 (65 tokens), 2 layers, hidden 128, 2 heads of 64, "
               "1000 classes",
               lambda: _seeded(_tv_vit), _pixels(3, TV_VIT["image_size"]), _tensor,
               requires="torchvision"),
    WholeModel("torchvision_resnet18", "torchvision resnet18 (all its layers, 1000 classes) on "
               "64x64 images",
               lambda: _seeded(_resnet18), _pixels(3, RESNET["image_size"]), _tensor,
               requires="torchvision"),
]}
