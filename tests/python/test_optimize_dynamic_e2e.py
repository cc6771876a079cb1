"""`fact.optimize(model, inputs, dynamic_shapes=...)` end to end on the CPU (the engine plans
the declared ranges, the host reference runs the calls): an MLP and a small transformer block
from bench/models, called at size 1, the hint, sizes that are not multiples of a tile and the
ranges' maxima, each output checked against the original module; a size outside the ranges
falls back to the original with a warning."""
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fact
from fact.dynamic_ranges import Range

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "models"))
from mingpt_block import MinGPTBlock  # noqa: E402
from tiny_mlp import TinyMLP  # noqa: E402

ENGINE_OK, ENGINE_WHY = fact.compose.engine_can_plan()
pytestmark = pytest.mark.skipif(not ENGINE_OK, reason=ENGINE_WHY)


def _optimized(module, example, shapes, tmp_path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        composed = fact.optimize(module, (example,), precision="strict", work_dir=tmp_path / "work",
                                 dynamic_shapes=shapes, **options)
    report = composed.fact_report
    assert report.composed, str(report)
    assert all(c.verified for c in report.composed), str(report)
    assert report.symbols and [s["name"] for s in report.symbols] == list(
        dict.fromkeys(r.name for shape in shapes for r in (shape or {}).values()))
    return composed


def _same_as_original(composed, module, sizes, embed):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # inside the ranges: never the original's fallback warning
        for batch, seq in sizes:
            x = torch.randn(batch, seq, embed)
            torch.testing.assert_close(composed(x), module(x), rtol=1e-4, atol=1e-4)


def test_mlp_serves_every_size_in_the_ranges(tmp_path):
    torch.manual_seed(0)
    module = TinyMLP(32, 64).eval()
    shapes = ({0: Range("batch", 1, 4), 1: Range("seq", 1, 16)},)
    composed = _optimized(module, torch.randn(2, 8, 32), shapes, tmp_path)
    assert composed.fact_report.remainder.startswith("inductor"), composed.fact_report.remainder
    import torch._dynamo.utils as dynamo_utils
    graphs = dynamo_utils.counters["stats"]["unique_graphs"]
    _same_as_original(composed, module, [(1, 1), (2, 8), (3, 13), (4, 16), (1, 13), (3, 1)], 32)
    assert dynamo_utils.counters["stats"]["unique_graphs"] == graphs  # warmed: nothing compiles now
    x = torch.randn(5, 8, 32)
    with pytest.warns(UserWarning, match="batch=5 is outside"):
        torch.testing.assert_close(composed(x), module(x))


def test_transformer_block_serves_every_size_in_the_ranges(tmp_path):
    torch.manual_seed(0)
    # head dim 16 (the attention kernels' smallest); the mask buffer outlasts seq; float32
    # rows need 16-byte alignment, so seq is declared a multiple of 4
    module = MinGPTBlock(embed=64, heads=4, max_seq_len=64).eval()
    shapes = ({0: Range("batch", 1, 2), 1: Range("seq", 8, 32, multiple=4)},)
    composed = _optimized(module, torch.randn(2, 16, 64), shapes, tmp_path, remainder="eager")
    rules = {c.rule for c in composed.fact_report.composed}
    assert {"attention_causal", "mlp_gelu_tanh"} <= rules, str(composed.fact_report)
    _same_as_original(composed, module, [(1, 8), (2, 16), (1, 20), (2, 32)], 64)
    for batch, seq, why in [(1, 18, "seq=18 is outside seq in 8..32 \\(multiple of 4\\)"), (1, 40, "seq=40 is outside")]:
        x = torch.randn(batch, seq, 64)
        with pytest.warns(UserWarning, match=why):
            torch.testing.assert_close(composed(x), module(x))


def test_every_bucket_edge_and_its_neighbours_are_served(tmp_path):
    """Each bucket runs its own image and kernel up to its edge; the sizes at an edge and one
    past it (the next bucket's first) are where a wrong bucket choice or a size fitted only
    inside a bucket would show. Every edge of each symbol, its neighbours, and 1, crossed with
    the other symbol's extremes."""
    torch.manual_seed(0)
    module = TinyMLP(32, 64).eval()
    shapes = ({0: Range("batch", 1, 6), 1: Range("seq", 1, 24)},)
    composed = _optimized(module, torch.randn(3, 8, 32), shapes, tmp_path, remainder="eager")
    symbols = {s["name"]: s for s in composed.fact_report.symbols}
    assert symbols["batch"]["edges"] == [1, 2, 4, 6] and symbols["seq"]["edges"] == [1, 2, 4, 8, 16, 24]

    def around(name):
        low, high = symbols[name]["min"], symbols[name]["max"]
        return sorted({v for edge in symbols[name]["edges"] for v in (edge - 1, edge, edge + 1)
                       if low <= v <= high} | {1})

    sizes = [(b, s) for b in around("batch") for s in (1, symbols["seq"]["max"])]
    sizes += [(b, s) for s in around("seq") for b in (1, symbols["batch"]["max"])]
    _same_as_original(composed, module, sizes, 32)
