"""The range spec (`--dynamic`), the per-input dimension names (`--dims`), the default binding
and their translation to torch.export's dynamic_shapes (python/fact/dynamic_ranges.py)."""
import pytest
import torch

from fact.dynamic_ranges import (Range, dynamic_shapes_from_spec, export_dynamic_shapes, parse_dims,
                                 parse_ranges)


class TwoInputs(torch.nn.Module):
    def forward(self, x, mask):
        return x * mask.unsqueeze(-1)


def test_ranges_parse():
    assert parse_ranges("batch=1..256,seq=16..4096:8@512/1024") == [
        Range("batch", 1, 256), Range("seq", 16, 4096, 8, (512, 1024))]
    assert parse_ranges(" b = 2 .. 4 ")[0] == Range("b", 2, 4)
    assert Range("seq", 16, 4096, 8, (512,)).spec() == "seq=16..4096:8@512"


@pytest.mark.parametrize("text,message", [
    ("batch", "is not NAME=MIN..MAX"),
    ("batch=1-8", "is not NAME=MIN..MAX"),
    ("1b=1..8", "not an identifier"),
    ("batch=8..1", "range 8..1 is empty"),
    ("batch=0..8", "minimum 0 is below 1"),
    ("seq=16..4096:8@100", "typical size 100 is not in 16..4096 and a multiple of 8"),
    ("seq=16..4096@5000", "typical size 5000 is not in 16..4096"),
    ("seq=9..15:16", "no multiple of 16 lies in 9..15"),
    ("a=1..2,a=1..3", "'a' is declared twice"),
    ("a=1..2,", "an empty range"),
])
def test_bad_ranges_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ranges(text)


def test_dims_parse_and_bind_by_name_or_position():
    assert parse_dims(["x:batch,seq,_", "1:batch,seq"]) == {"x": ["batch", "seq", None], "1": ["batch", "seq"]}
    inputs = (torch.randn(2, 8, 4), torch.randn(2, 8))
    shapes = dynamic_shapes_from_spec("batch=1..4,seq=8..64", ["x:batch,seq,_", "1:batch,seq"],
                                      TwoInputs(), inputs)
    assert shapes == ({0: Range("batch", 1, 4), 1: Range("seq", 8, 64)},
                      {0: Range("batch", 1, 4), 1: Range("seq", 8, 64)})
    for bad, message in [(["y:batch"], "'y' is not a forward parameter"),
                         (["x:batch,seq"], "2 dimensions named, the input has 3"),
                         (["x:batch,len,_"], "'len' is not a declared range"),
                         (["x"], "is not INPUT:DIM"), (["5:batch"], "input 5 does not exist")]:
        with pytest.raises(ValueError, match=message):
            dynamic_shapes_from_spec("batch=1..4,seq=8..64", bad, TwoInputs(), inputs)


def test_default_binding_follows_the_first_input():
    inputs = (torch.randn(2, 8, 4), torch.randn(2, 8))
    shapes = dynamic_shapes_from_spec("batch=1..4,seq=8..64", None, TwoInputs(), inputs)
    assert shapes[1] == {0: Range("batch", 1, 4), 1: Range("seq", 8, 64)}
    # a dimension whose example size differs from the first input's stays static
    shapes = dynamic_shapes_from_spec("batch=1..4", None, TwoInputs(), (torch.randn(2, 8, 4), torch.randn(3, 8)))
    assert shapes == ({0: Range("batch", 1, 4)}, None)
    with pytest.raises(ValueError, match="declares 4 ranges but the first input has 3"):
        dynamic_shapes_from_spec("a=1..2,b=1..2,c=1..2,d=1..2", None, TwoInputs(), inputs)


def test_export_dynamic_shapes_checks_hints_and_accepts_dims():
    inputs = (torch.randn(2, 8, 4), torch.randn(2, 8))
    batch = torch.export.Dim("batch", min=1, max=4)
    shapes, declared = export_dynamic_shapes({"x": {0: batch}, "mask": {0: batch}}, TwoInputs(), inputs)
    assert shapes[0][0] is shapes[1][0] and declared[(1, 0)] == Range("batch", 1, 4)
    with pytest.raises(ValueError, match="the example size 8 .* is not in 16..64"):
        export_dynamic_shapes(({1: Range("seq", 16, 64)}, None), TwoInputs(), inputs)
    with pytest.raises(ValueError, match="not in 8..64 and a multiple of 16"):
        export_dynamic_shapes(({1: Range("seq", 8, 64, 16)}, None), TwoInputs(), inputs)
    with pytest.raises(ValueError, match="has no max"):
        export_dynamic_shapes(({0: torch.export.Dim("b")}, None), TwoInputs(), inputs)
    with pytest.raises(ValueError, match="different sizes"):
        export_dynamic_shapes(({0: batch}, {0: batch}), TwoInputs(), (torch.randn(2, 8, 4), torch.randn(3, 8)))
