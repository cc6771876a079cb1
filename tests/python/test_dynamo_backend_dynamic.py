"""`torch.compile(model, backend="fact", dynamic=True)` and `mark_dynamic` with declared ranges
(CPU): the graph dynamo hands the backend has symbolic sizes; the backend plans one module over
the ranges, and dynamo does not compile again for another size inside them. Outputs are
compared with the original module at 1, sizes that are not multiples of 8, and the maxima.

Dynamo specializes a size of 1 unless sizes are treated size-obliviously
(`backed_size_oblivious`), so the calls run under that setting."""
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch._dynamo.utils as dynamo_utils
import torch.fx.experimental._config as fx_config

import fact
from fact import dynamo_backend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "models"))
from mingpt_block import MinGPTBlock  # noqa: E402
from tiny_mlp import TinyMLP  # noqa: E402

ENGINE_OK, ENGINE_WHY = fact.compose.engine_can_plan()
pytestmark = pytest.mark.skipif(not ENGINE_OK, reason=ENGINE_WHY)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    with fx_config.patch(backed_size_oblivious=True):
        yield
    torch._dynamo.reset()


def _serves(module, compiled, first, sizes, embed):
    """Calls `compiled` at `first`, then at each size: equal to the original, no recompile."""
    with torch.no_grad():
        x = torch.randn(*first, embed)
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # inside the ranges: never the original's fallback warning
        graphs = dynamo_utils.counters["stats"]["unique_graphs"]
        report = dynamo_backend.reports[-1]
        for batch, seq in sizes:
            x = torch.randn(batch, seq, embed)
            torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
        assert dynamo_utils.counters["stats"]["unique_graphs"] == graphs
        assert dynamo_backend.reports[-1] is report
    return report


def test_mlp_dynamic_true_plans_the_declared_ranges(tmp_path):
    torch.manual_seed(0)
    module = TinyMLP(32, 64).eval()
    compiled = torch.compile(module, backend="fact", dynamic=True, options={
        "dynamic": "batch=1..4,seq=1..16", "precision": "strict", "work_dir": str(tmp_path)})
    report = _serves(module, compiled, (3, 8), [(1, 1), (1, 13), (2, 5), (4, 16)], 32)
    assert report.composed, str(report)
    assert [(s["name"], s["min"], s["max"]) for s in report.symbols] == [("batch", 1, 4), ("seq", 1, 16)]


def test_mingpt_block_dynamic_true_plans_the_declared_ranges(tmp_path):
    torch.manual_seed(0)
    # head dim 16; the mask buffer (64) outlasts seq's maximum; float32 rows need 16-byte
    # alignment, so seq is declared a multiple of 4
    module = MinGPTBlock(embed=64, heads=4, max_seq_len=64).eval()
    compiled = torch.compile(module, backend="fact", dynamic=True, options={
        "dynamic": "batch=1..3,seq=8..32:4", "dims": "x:batch,seq,_", "precision": "strict",
        "work_dir": str(tmp_path)})
    report = _serves(module, compiled, (2, 16), [(1, 8), (3, 20), (1, 28), (3, 32)], 64)
    assert report.composed, str(report)
    assert {s["name"] for s in report.symbols} == {"batch", "seq"}


def test_a_dynamic_size_without_a_range_is_a_clear_error(tmp_path):
    module = TinyMLP(32, 64).eval()
    compiled = torch.compile(module, backend="fact", dynamic=True,
                             options={"precision": "strict", "work_dir": str(tmp_path)})
    with pytest.raises(Exception, match=r"no declared range; pass options=\{'dynamic'"):
        with torch.no_grad():
            compiled(torch.randn(3, 8, 32))


def test_mark_dynamic_on_one_dimension(tmp_path):
    torch.manual_seed(0)
    module = TinyMLP(32, 64).eval()
    compiled = torch.compile(module, backend="fact", options={
        "dynamic": "seq=1..16", "dims": "0:_,seq,_", "precision": "strict", "work_dir": str(tmp_path)})
    x = torch.randn(2, 8, 32)
    torch._dynamo.mark_dynamic(x, 1)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    graphs = dynamo_utils.counters["stats"]["unique_graphs"]
    report = dynamo_backend.reports[-1]
    assert report.composed and [s["name"] for s in report.symbols] == ["seq"], str(report)
    with torch.no_grad():
        for seq in (1, 13, 16):
            x = torch.randn(2, seq, 32)
            torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    assert dynamo_utils.counters["stats"]["unique_graphs"] == graphs


def test_mark_dynamic_with_dynamos_bounded_range(tmp_path):
    torch.manual_seed(0)
    module = TinyMLP(32, 64).eval()
    compiled = torch.compile(module, backend="fact",
                             options={"precision": "strict", "work_dir": str(tmp_path)})
    x = torch.randn(3, 8, 32)
    torch._dynamo.mark_dynamic(x, 0, min=1, max=4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)
    report = dynamo_backend.reports[-1]
    assert report.composed and [(s["min"], s["max"]) for s in report.symbols] == [(1, 4)], str(report)
