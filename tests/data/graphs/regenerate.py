"""Regenerates the committed graph JSON fixtures in this folder.

    $V/bin/python tests/data/graphs/regenerate.py [--check]

The example blocks are captured on the meta device at full size (no weight memory), so the
fixtures are deterministic: running this again gives byte-identical files. --check compares
instead of writing and exits 1 when a fixture is stale.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "python"))

from fact.graph_capture import capture  # noqa: E402
from fact.graph_writer import dumps_graph  # noqa: E402
from fact.model_file import build_from_model_file  # noqa: E402


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 512)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Bmm(torch.nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


class MatmulTransposed(torch.nn.Module):
    """x @ w^T with w an input: the transposed-operand GEMM form."""

    def forward(self, x, w):
        return torch.matmul(x, w.transpose(0, 1))


def _model_file_fixture(spec: str, dtype: str):
    return lambda: build_from_model_file(str(ROOT / spec), dtype=dtype, device="meta")


def _small_fixture(module_class, *shapes):
    def build():
        with torch.device("meta"):
            return module_class().eval(), tuple(torch.randn(*s) for s in shapes)
    return build


FIXTURES = {
    "mingpt_block_fp32.json": _model_file_fixture("bench/models/mingpt_block.py:MinGPTBlock", "float32"),
    "mingpt_block_bf16.json": _model_file_fixture("bench/models/mingpt_block.py:MinGPTBlock", "bfloat16"),
    "llama_block_bf16.json": _model_file_fixture("bench/models/llama_block.py:LlamaDecoderBlock", "bfloat16"),
    "linear_relu.json": _small_fixture(LinearRelu, (64, 256)),
    "bmm.json": _small_fixture(Bmm, (8, 128, 64), (8, 64, 32)),
    "matmul_transposed.json": _small_fixture(MatmulTransposed, (128, 64), (96, 64)),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for name, build in FIXTURES.items():
        module, inputs = build()
        text = dumps_graph(capture(module, inputs))
        path = HERE / name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("stale fixtures: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
