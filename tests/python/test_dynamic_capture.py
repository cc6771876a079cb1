"""Capture with declared dynamic dimensions (docs/dynamic_shapes.md): top-level "symbols",
symbolic shapes and strides as expressions over the declared names, {"sym"} / {"syms"}
arguments, no size-only nodes; and the expression printer's grammar."""
import sys
from pathlib import Path

import pytest
import sympy
import torch
from torch.export import Dim

from fact.dynamic_ranges import Range
from fact.graph_capture import capture_exported
from fact.graph_writer import CaptureError
from fact.size_expressions import expression_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "models"))
from mingpt_block import CausalSelfAttention  # noqa: E402
from tiny_mlp import TinyMLP  # noqa: E402


def _values(doc):
    return {v["id"]: v for v in doc["values"]}


def test_dynamic_mlp_writes_symbols_and_expressions():
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=64)
    doc, program = capture_exported(TinyMLP(32, 64), (torch.randn(2, 16, 32),),
                                    dynamic_shapes=({0: batch, 1: seq},))
    assert program is not None
    assert doc["symbols"] == [
        {"name": "batch", "min": 1, "max": 8, "hint": 2, "multiple": 1, "typical": []},
        {"name": "seq", "min": 2, "max": 64, "hint": 16, "multiple": 1, "typical": []}]
    values = _values(doc)
    assert values["x"]["shape"] == ["batch", "seq", 32] and values["x"]["stride"] == ["32*seq", 32, 1]
    gelu = next(v for v in doc["values"] if v["id"].startswith("gelu"))
    assert gelu["shape"] == ["batch", "seq", 64]
    assert not any(n["target"] in ("aten.sym_size.int", "operator.mul") for n in doc["nodes"])


def test_attention_block_writes_sym_arguments():
    batch, seq = Range("batch", 1, 4), Range("seq", 8, 64, multiple=8, typical=(32,))
    module = CausalSelfAttention(32, 4, 128)  # the mask buffer is longer than any seq
    doc, _ = capture_exported(module, (torch.randn(2, 16, 32),), dynamic_shapes=({0: batch, 1: seq},))
    assert doc["symbols"][1] == {"name": "seq", "min": 8, "max": 64, "hint": 16, "multiple": 8,
                                 "typical": [32]}
    views = [n for n in doc["nodes"] if n["target"] == "aten.view.default"]
    assert views and views[0]["args"][1] == {"syms": ["batch", "seq", 4, 8]}
    slices = [n for n in doc["nodes"] if n["target"] == "aten.slice.Tensor"]
    assert any({"sym": "seq"} in n["args"] for n in slices)
    assert all(not n["target"].startswith("aten.sym_") for n in doc["nodes"])
    matmul = _values(doc)["matmul"]
    assert matmul["shape"] == ["batch", 4, "seq", "seq"]
    assert matmul["stride"] == ["4*seq*seq", "seq*seq", "seq", 1]


def test_static_capture_is_unchanged():
    doc, _ = capture_exported(TinyMLP(32, 64), (torch.randn(2, 16, 32),))
    assert "symbols" not in doc and _values(doc)["x"]["shape"] == [2, 16, 32]


def test_a_specialized_dimension_is_a_capture_error():
    class NeedsEight(torch.nn.Module):
        def forward(self, x):
            return x.view(8, -1) * 2

    with pytest.raises(CaptureError, match="cannot export NeedsEight with the declared dynamic"):
        capture_exported(NeedsEight(), (torch.randn(8, 4),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},))


def test_expressions_in_the_grammar():
    b, s = sympy.symbols("s0 s1", integer=True, positive=True)
    names = {b: "batch", s: "seq"}
    from torch.utils._sympy.functions import FloorDiv, Mod
    assert expression_of(768 * b * s, names) == "768*batch*seq"
    assert expression_of(s - 1, names) == "seq - 1"
    assert expression_of(s ** 2 * 4, names) == "4*seq*seq"
    assert expression_of(FloorDiv(s + 7, 8), names) == "(seq + 7)//8"
    assert expression_of(b * FloorDiv(s, 2), names) == "batch*(seq//2)"
    assert expression_of(1 - s, names) == "1 - seq"
    with pytest.raises(CaptureError, match="outside the grammar"):
        expression_of(Mod(s, 8), names)
    with pytest.raises(CaptureError, match="not a declared dynamic dimension"):
        expression_of(sympy.Symbol("u0") + s, names)
