"""The training benchmark's models (bench/training/run_training.py): each a module, the shape
of one batch, its precision setup and the FACT precision mode it is composed in.

    mlp_f32      a KernelBench-style deep MLP, Linear 4096->4096 x3 with ReLU between, float32
                 (`strict`), `--mlp-tokens` rows per batch (one entry per value)
    mingpt_f32   the minGPT block (bench/models/mingpt_block.py), float32 (`strict`)
    mingpt_bf16  the same block under bf16 autocast, float32 master weights (`native`)
    llama_bf16   the Llama block (bench/models/llama_block.py) at hidden 2048, 16 heads, 4 kv
                 heads, head dim 128, intermediate 5632, under bf16 autocast (`native`); also
                 timed against torch.compile of its SDPA twin (the inference benchmarks' baseline)

`small=True`: the same structures at narrow widths (CPU smoke runs).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from torch import nn

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
if str(MODELS_DIR) not in sys.path:
    sys.path.append(str(MODELS_DIR))


class DeepMLP(nn.Module):
    """Linear(width, width) `layers` times with a ReLU between consecutive layers."""

    def __init__(self, width: int = 4096, layers: int = 3):
        super().__init__()
        blocks: list[nn.Module] = []
        for index in range(layers):
            blocks.append(nn.Linear(width, width))
            if index < layers - 1:
                blocks.append(nn.ReLU())
        self.net = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass
class Case:
    """One model to train: `model` (float32 parameters, on the CPU), the input shape of one
    batch, `autocast` (None: float32 throughout; else the autocast dtype, weights stay float32),
    the FACT precision mode, and `baselines`: extra torch.compile baselines, name -> module
    sharing nothing with `model` but its initial weights."""
    name: str
    model: nn.Module
    input_shape: tuple
    autocast: Optional[torch.dtype]
    precision: str
    baselines: dict = field(default_factory=dict)

    @property
    def dtype_label(self) -> str:
        return "bf16 autocast (float32 weights)" if self.autocast is torch.bfloat16 else "float32"


def build(name: str, *, small: bool, mlp_tokens: int, batch: Optional[int], seq: Optional[int]) -> Case:
    """The case `name` (a model of the list above, `mlp_f32` named `mlp_f32-<tokens>`), its
    weights drawn with seed 0. `batch`/`seq`: the transformer blocks' batch shape (None: each
    model's default)."""
    torch.manual_seed(0)
    if name.startswith("mlp_f32"):
        width = 64 if small else 4096
        return Case(name, DeepMLP(width), (mlp_tokens, width), None, "strict")
    if name in ("mingpt_f32", "mingpt_bf16"):
        from mingpt_block import MinGPTBlock
        embed, heads = (64, 4) if small else (768, 8)
        batch, seq = batch or (2 if small else 8), seq or (32 if small else 512)
        model = MinGPTBlock(embed=embed, heads=heads, max_seq_len=seq)
        bf16 = name.endswith("bf16")
        return Case(name, model, (batch, seq, embed), torch.bfloat16 if bf16 else None,
                    "native" if bf16 else "strict")
    if name == "llama_bf16":
        from llama_block import LlamaDecoderBlock, sdpa_twin
        widths = (dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128) if small else
                  dict(hidden=2048, heads=16, kv_heads=4, head_dim=128, intermediate=5632))
        batch, seq = batch or (2 if small else 2), seq or (32 if small else 2048)
        model = LlamaDecoderBlock(**widths, max_seq_len=seq)
        return Case(name, model, (batch, seq, widths["hidden"]), torch.bfloat16, "native",
                    baselines={"compile_sdpa": sdpa_twin(model)})
    raise SystemExit(f"unknown model {name} (mlp_f32, mingpt_f32, mingpt_bf16, llama_bf16)")
