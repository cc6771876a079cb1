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

`FULL_MODELS` holds the same models at their published sizes (GPT-2 124M at 8 x 1024 tokens, a
1B-class Llama width with 4 layers at 4 x 2048, BERT-base at 32 x 512, ViT-B/16 at 64 x 224²),
for the GPU benchmark bench/whole_models/run_whole_models.py; they are kept out of `MODELS` so
the CPU tests never build them. Each family is one builder over a sizes dict (`FAMILIES`:
family -> (sizes, name, batch) -> WholeModel), so a caller can override any size.
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
    family: str = ""                                 # its builder in FAMILIES ("" : none)
    sizes: dict = dataclasses.field(default_factory=dict)   # the sizes it was built with


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


GPT2_FULL = dict(GPT2, n_positions=1024, n_embd=768, n_layer=12, n_head=12, seq=1024)   # 124M


def _gpt2(sizes: dict = GPT2) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=sizes["vocab_size"],
                        n_positions=max(sizes["n_positions"], sizes["seq"]),
                        n_embd=sizes["n_embd"], n_layer=sizes["n_layer"], n_head=sizes["n_head"],
                        use_cache=False, attn_implementation="sdpa")
    return GPT2LMHeadModel(config)   # LM head tied to the token embedding


LLAMA = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, seq=32)


LLAMA_HEAVY = dict(LLAMA, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=2, seq=64)


# A 1B-class width (TinyLlama's: hidden 2048, 16 query / 4 KV heads of 128, SwiGLU 5632), 4 layers
LLAMA_FULL = dict(LLAMA, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                  num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                  seq=2048)


def _llama(sizes: dict = LLAMA) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=sizes["vocab_size"], hidden_size=sizes["hidden_size"],
                         intermediate_size=sizes["intermediate_size"],
                         num_hidden_layers=sizes["num_hidden_layers"],
                         num_attention_heads=sizes["num_attention_heads"],
                         num_key_value_heads=sizes["num_key_value_heads"],
                         max_position_embeddings=max(sizes["max_position_embeddings"],
                                                     sizes["seq"]),
                         rms_norm_eps=1e-5, use_cache=False, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config)


BERT = dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=512, max_position_embeddings=64, seq=32)


BERT_FULL = dict(BERT, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, seq=512)   # BERT-base


def _bert(sizes: dict = BERT) -> torch.nn.Module:
    from transformers import BertConfig, BertModel
    config = BertConfig(vocab_size=sizes["vocab_size"], hidden_size=sizes["hidden_size"],
                        num_hidden_layers=sizes["num_hidden_layers"],
                        num_attention_heads=sizes["num_attention_heads"],
                        intermediate_size=sizes["intermediate_size"],
                        max_position_embeddings=max(sizes["max_position_embeddings"], sizes["seq"]),
                        attn_implementation="sdpa")
    return BertModel(config, add_pooling_layer=True)


def _bert_inputs(sizes: dict = BERT) -> Callable[[int, int], tuple]:
    """Token ids, a padding mask (row i keeps seq - 3 i tokens, at least half), token types
    (the second half of each row is segment 1)."""
    def make(batch: int, seed: int) -> tuple:
        seq = sizes["seq"]
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, sizes["vocab_size"], (batch, seq), generator=generator)
        lengths = [max(seq // 2, seq - 3 * ((i + seed) % 4)) for i in range(batch)]
        mask = torch.zeros(batch, seq, dtype=torch.long)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
        types = torch.zeros(batch, seq, dtype=torch.long)
        types[:, seq // 2:] = 1
        return ids, mask, types
    return make


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


TV_VIT_FULL = dict(TV_VIT, image_size=224, patch_size=16, num_layers=12, num_heads=12,
                   hidden_dim=768, mlp_dim=3072)   # vit_b_16's own sizes (197 tokens)


def _tv_vit(sizes: dict = TV_VIT) -> torch.nn.Module:
    """vit_b_16's architecture (torchvision's VisionTransformer: conv patchify, class token,
    nn.MultiheadAttention, MLP, head); vit_b_16() fixes the patch size and depth, so the class
    is built directly from `sizes` (TV_VIT_FULL: vit_b_16's)."""
    from torchvision.models.vision_transformer import VisionTransformer
    model = VisionTransformer(**sizes)
    # torchvision zero-initializes the classification head (a fresh model's logits are all 0):
    # random weights there, as in a trained model, or the output would test nothing.
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    return model


RESNET = dict(image_size=64, num_classes=1000)


def _resnet18() -> torch.nn.Module:
    from torchvision.models import resnet18
    return resnet18(weights=None, num_classes=RESNET["num_classes"])


def gpt2_lm(sizes: dict, name: str = "gpt2_lm", batch: int = 2, heavy: bool = False) -> WholeModel:
    return WholeModel(name, f"GPT2LMHeadModel: {sizes['n_layer']} layers, n_embd {sizes['n_embd']}, "
                      f"{sizes['n_head']} heads of {sizes['n_embd'] // sizes['n_head']}, vocab "
                      f"{sizes['vocab_size']}, seq {sizes['seq']}, batch {batch}, tied LM head, SDPA",
                      lambda: _seeded(lambda: _gpt2(sizes)),
                      _token_ids(sizes["vocab_size"], sizes["seq"]), _fields("logits"),
                      batch=batch, heavy=heavy, family="gpt2", sizes=dict(sizes))


def llama_causal_lm(sizes: dict, name: str = "llama_causal_lm", batch: int = 2,
                    heavy: bool = False) -> WholeModel:
    head = sizes["hidden_size"] // sizes["num_attention_heads"]
    return WholeModel(name, f"LlamaForCausalLM: {sizes['num_hidden_layers']} layers, hidden "
                      f"{sizes['hidden_size']}, {sizes['num_attention_heads']} query / "
                      f"{sizes['num_key_value_heads']} KV heads of {head} (GQA), SwiGLU "
                      f"{sizes['intermediate_size']}, vocab {sizes['vocab_size']}, seq "
                      f"{sizes['seq']}, batch {batch}, SDPA",
                      lambda: _seeded(lambda: _llama(sizes)),
                      _token_ids(sizes["vocab_size"], sizes["seq"]), _fields("logits"),
                      batch=batch, heavy=heavy, family="llama", sizes=dict(sizes))


def bert_pooler(sizes: dict, name: str = "bert_pooler", batch: int = 2) -> WholeModel:
    head = sizes["hidden_size"] // sizes["num_attention_heads"]
    return WholeModel(name, f"BertModel with pooler: {sizes['num_hidden_layers']} layers, hidden "
                      f"{sizes['hidden_size']}, {sizes['num_attention_heads']} heads of {head}, "
                      f"vocab {sizes['vocab_size']}, seq {sizes['seq']}, batch {batch}, padding "
                      f"mask + token types, SDPA",
                      lambda: _seeded(lambda: _bert(sizes)), _bert_inputs(sizes),
                      _fields("last_hidden_state", "pooler_output"),
                      batch=batch, family="bert", sizes=dict(sizes))


def torchvision_vit(sizes: dict, name: str = "torchvision_vit", batch: int = 2) -> WholeModel:
    tokens = (sizes["image_size"] // sizes["patch_size"]) ** 2 + 1
    head = sizes["hidden_dim"] // sizes["num_heads"]
    return WholeModel(name, f"torchvision VisionTransformer (vit_b_16's architecture): "
                      f"{sizes['image_size']}x{sizes['image_size']} images, patch "
                      f"{sizes['patch_size']} ({tokens} tokens), {sizes['num_layers']} layers, "
                      f"hidden {sizes['hidden_dim']}, {sizes['num_heads']} heads of {head}, "
                      f"{sizes['num_classes']} classes, batch {batch}",
                      lambda: _seeded(lambda: _tv_vit(sizes)), _pixels(3, sizes["image_size"]),
                      _tensor, requires="torchvision", batch=batch, family="torchvision_vit",
                      sizes=dict(sizes))


FAMILIES: dict[str, Callable[..., WholeModel]] = {
    "gpt2": gpt2_lm, "llama": llama_causal_lm, "bert": bert_pooler,
    "torchvision_vit": torchvision_vit}


MODELS: dict[str, WholeModel] = {m.name: m for m in [
    gpt2_lm(GPT2),
    llama_causal_lm(LLAMA),
    gpt2_lm(GPT2_HEAVY, "gpt2_lm_heavy", batch=4, heavy=True),
    llama_causal_lm(LLAMA_HEAVY, "llama_causal_lm_heavy", batch=4, heavy=True),
    bert_pooler(BERT),
    WholeModel("vit_classifier", "ViTForImageClassification: 32x32 images, patch 8 (17 tokens), "
               "2 layers, hidden 128, 2 heads of 64, 1000 labels, SDPA",
               lambda: _seeded(_vit), _pixels(VIT["num_channels"], VIT["image_size"]),
               _fields("logits")),
    torchvision_vit(TV_VIT),
    WholeModel("torchvision_resnet18", "torchvision resnet18 (all its layers, 1000 classes) on "
               "64x64 images",
               lambda: _seeded(_resnet18), _pixels(3, RESNET["image_size"]), _tensor,
               requires="torchvision"),
]}


# The published sizes (module docstring): the GPU benchmark's models, never the CPU tests'.
FULL_MODELS: dict[str, WholeModel] = {m.name: m for m in [
    gpt2_lm(GPT2_FULL, "gpt2_lm_full", batch=8),
    llama_causal_lm(LLAMA_FULL, "llama_causal_lm_full", batch=4),
    bert_pooler(BERT_FULL, "bert_pooler_full", batch=32),
    torchvision_vit(TV_VIT_FULL, "torchvision_vit_full", batch=64),
]}
