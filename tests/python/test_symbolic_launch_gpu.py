"""fact::launch with calls over declared symbols on a CUDA GPU (skipped elsewhere): the fake
"axpby" kind's CUDA kernel library (tests/python/data/fake_kind_cuda.cu) run through the
native op (or the ctypes path with FACT_NATIVE=0) at several sizes: buckets with their own
images and libraries, patches, polynomial element offsets and result shapes, launch_out; and a
plan over a symbol applied on the GPU (Inductor remainder warmed at the bucket edges, the
never-slower check per bucket, a CUDA graph per size tuple)."""
import json
import os
import warnings

import pytest
import torch

import fact.compose
import fact.ops
import fake_kind
from fact import native
from test_compose_gpu import cuda_kind_library  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (GPU tests run on the device host)"),
]
BATCH = fake_kind.size("batch", (1, 1))


def test_symbolic_calls_run_their_bucket_kernels(cuda_kind_library):
    library = str(cuda_kind_library)
    call = fact.ops.register_call(
        fake_kind.symbolic_axpby_call("gpu", "x", "z", "y", 96, 2.0, 3.0, bucket_a={0: 10.0, 3: -1.0}, z_rows=2),
        library, symbols=[fake_kind.batch_symbol()], bucket_libraries=[(library, None)] * 4)
    if os.environ.get("FACT_NATIVE", "1") != "0":
        assert native.active(), native.describe()
    for batch, a in [(1, 10.0), (2, 2.0), (3, 2.0), (4, 2.0), (5, -1.0), (8, -1.0)]:
        x = torch.randn(batch, 96, device="cuda")
        z = torch.randn(2 * batch, 96, device="cuda")
        (y,) = torch.ops.fact.launch([x, z], call, [batch])
        assert y.shape == (batch, 96) and y.stride() == (96, 1)
        torch.testing.assert_close(y, a * x + 3.0 * z[batch:])
        out = [torch.full((batch, 96), float("nan"), device="cuda")]
        torch.ops.fact.launch_out([x, z], out, call, [batch])
        torch.testing.assert_close(out[0], y)
    with pytest.raises(Exception, match="above its range"):
        torch.ops.fact.launch([torch.randn(9, 96, device="cuda"), torch.randn(18, 96, device="cuda")], call, [9])
    with pytest.raises(Exception, match="operand 0"):
        torch.ops.fact.launch([torch.randn(3, 96, device="cuda"), torch.randn(8, 96, device="cuda")], call, [4])


class Chain(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        return torch.relu(y) + x


def test_a_plan_over_a_symbol_composes_on_the_gpu(tmp_path, cuda_kind_library):
    kernels = {"axpbykey": {"name": "axpby_cuda", "kind": "axpby", "pattern": "axpby",
                            "entry": "fact_axpby_cuda", "library": str(cuda_kind_library),
                            "status": "built", "reason": ""}}
    call = fake_kind.symbolic_axpby_call("0", "x", "z", "add", 96, 2.0, 3.0)
    call["kernel"] = "axpbykey"
    for bucket in call["buckets"]:
        bucket["kernel"] = "axpbykey"
    doc = {"schema": "fact.plan/2", "abi_version": 2, "precision": "strict", "device": "cuda",
           "symbols": [fake_kind.batch_symbol(hint=4)],
           "inputs": [{"shape": [BATCH, 96], "dtype": "torch.float32"}] * 2,
           "status": "planned", "reason": "", "capture": "torch.export", "patterns": None,
           "kernels": kernels, "notes": [],
           "replacements": [fake_kind.replacement(0, ["mul", "mul_1", "add"], ["x", "z"], ["add"], [call])]}
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    inputs = (torch.randn(4, 96, device="cuda"), torch.randn(4, 96, device="cuda"))
    composed = fact.compose.apply_plan(Chain(), inputs, tmp_path, remainder="inductor", cuda_graphs=True)
    report = composed.fact_report
    assert [c.verified for c in report.composed] == [True], str(report)
    # the never-slower check timed each bucket edge as a graph replay: those four are captured
    assert report.cuda_graphs.startswith("on, one per signature or size tuple"), report.cuda_graphs
    assert composed._shape_graphs.captured == 4, report.cuda_graphs
    assert report.remainder.startswith("inductor (symbolic shapes"), report.remainder
    assert [b["sizes"] for b in report.buckets] == ["batch=1", "batch=2", "batch=4", "batch=8"], report.buckets
    assert all(b.get("composed_ms", 0) > 0 for b in report.buckets), report.buckets
    print(report)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        # four calls per size: the first two run without a graph (the second timed), the third
        # captures, the fourth replays; fresh inputs each time (a stale static buffer would show)
        kept = []
        for batch in (1, 3, 4, 7, 8, 3):
            for _ in range(4):
                x, z = torch.randn(batch, 96, device="cuda"), torch.randn(batch, 96, device="cuda")
                got = composed(x, z)
                torch.testing.assert_close(got, Chain()(x, z), rtol=1e-6, atol=1e-5)
                kept.append((got, Chain()(x, z)))
        # outputs are copies: a later replay never overwrites a result the caller kept
        for got, want in kept:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    # a size whose bucket runs the composed module was captured on its third call; a bucket
    # that runs torch.compile of the original (the never-slower check) never reaches the graphs
    graphs = composed._shape_graphs
    composed_rows = {b["row"] for b in report.buckets if b["runs"] == "composed"}
    called = {(b,) for b in (3, 7) if composed._bucket_table.index((b,)) in composed_rows}
    assert set(graphs.graphs) == {(1,), (2,), (4,), (8,)} | called, report.cuda_graphs
    assert f"{4 + len(called)} captured" in report.cuda_graphs, report.cuda_graphs
    assert "MiB reserved" in report.cuda_graphs, report.cuda_graphs
