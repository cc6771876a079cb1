"""A GEMM result written into padded rows and handed on as a view (patterns/gemm/README.md,
"Alignment: padding"; docs/plan.md, a result's "alloc_shape"), composed on the CPU (the host
reference stands in for the kernels). A last nn.Linear(64, 257) — 257 columns are not a whole
number of 16-byte vectors in bf16 or float32 — whose output only leaves the graph is planned
with ld = 264 (bf16) or 260 (float32): the composed module returns the [..., :257] view of a
dense [2, 8, ld] allocation, equal to the original within tolerance. Where the output is read
by anything but a view keeping the last dimension (a softmax over it, a flatten), the rule
declines and the result stays contiguous."""
import json

import pytest
import torch

import fact
from fact import ops
from compose_testing import assert_matches, needs_engine_plan, optimize_eagerly


class Head(torch.nn.Module):
    """A hidden layer, then the unaligned head; `then` is applied to the head's output."""

    def __init__(self, then=None):
        super().__init__()
        self.hidden = torch.nn.Linear(32, 64)
        self.head = torch.nn.Linear(64, 257)
        self.then = then

    def forward(self, x):
        y = self.head(torch.tanh(self.hidden(x)))
        return self.then(y) if self.then is not None else y


CASES = [(torch.float32, "strict", 260, 1e-5), (torch.bfloat16, "native", 264, 2e-2)]


def _result_of_head(work_dir):
    """The plan's result entry of the call that computes the head (N = 257)."""
    plan = json.loads((work_dir / "plan.json").read_text())
    for replacement in plan["replacements"]:
        for call in replacement.get("calls", []):
            for result in call.get("results", []):
                if result["shape"][-1] == 257:
                    return result
    raise AssertionError("no call writes the head's output")


@needs_engine_plan
@pytest.mark.parametrize("remainder", ["eager", "inductor"])
@pytest.mark.parametrize("dtype,precision,ld,tol", CASES, ids=["float32", "bf16"])
def test_an_unaligned_output_is_a_view_of_padded_rows(tmp_path, dtype, precision, ld, tol, remainder):
    torch.manual_seed(0)
    module = Head().to(dtype).eval()
    make = lambda: (torch.randn(2, 8, 32, dtype=dtype),)  # noqa: E731
    composed = fact.optimize(module, make(), work_dir=tmp_path, remainder=remainder, precision=precision)
    report = composed.fact_report
    assert report.composed and not report.left_to_pytorch, str(report)
    assert all(entry.verified for entry in report.composed), str(report)
    assert f"N padded 257\u2192{ld}" in str(report)
    result = _result_of_head(tmp_path)
    assert result["shape"] == [2, 8, 257]
    assert result["stride"] == [8 * ld, ld, 1]
    assert result["alloc_shape"] == [2, 8, ld]
    assert_matches(composed, module, make, tol=tol, strides=[(8 * ld, ld, 1)])
    with torch.no_grad():
        got = composed(*make())
    # The view of the whole allocation (its last row's padding included), not a copy.
    assert got.untyped_storage().nbytes() == 2 * 8 * ld * got.element_size()
    assert got.storage_offset() == 0


@needs_engine_plan
@pytest.mark.parametrize("then,shape", [
    (lambda y: torch.softmax(y, dim=-1), (2, 8, 257)),
    (lambda y: y.view(-1), (2 * 8 * 257,)),
], ids=["softmax", "flatten"])
@pytest.mark.parametrize("dtype,precision,ld,tol", CASES, ids=["float32", "bf16"])
def test_a_result_read_otherwise_keeps_its_rows(tmp_path, then, shape, dtype, precision, ld, tol):
    torch.manual_seed(0)
    module = Head(then).to(dtype).eval()
    make = lambda: (torch.randn(2, 8, 32, dtype=dtype),)  # noqa: E731
    composed = optimize_eagerly(module, make(), tmp_path, precision)
    assert composed.fact_report.composed, str(composed.fact_report)
    result = _result_of_head(tmp_path)
    assert "alloc_shape" not in result
    assert result["stride"] == [8 * 257, 257, 1]
    assert_matches(composed, module, make, tol=tol)
    with torch.no_grad():
        got = composed(*make())
    assert got.shape == shape and got.is_contiguous()


def test_allocate_result_gives_the_whole_allocation_and_the_fake_the_same_strides():
    spec = ops.TensorSpec(torch.bfloat16, (2, 8, 257), (8 * 264, 264, 1), (2, 8, 264))
    assert ops.storage_elements(spec) == 2 * 8 * 264
    tensor = ops.allocate_result(spec, "cpu")
    assert tensor.shape == (2, 8, 257) and tensor.stride() == (8 * 264, 264, 1)
    assert tensor.untyped_storage().nbytes() == 2 * 8 * 264 * 2
    assert tensor._base is None  # not a view of another tensor: the op's outputs alias nothing
    # empty_strided of the same view would hold (15 * 264 + 257) elements only: the last row's
    # padding would lie outside it.
    short = torch.empty_strided((2, 8, 257), (8 * 264, 264, 1), dtype=torch.bfloat16)
    assert short.untyped_storage().nbytes() < tensor.untyped_storage().nbytes()
    meta = ops.allocate_result(spec, "meta")
    assert meta.stride() == tensor.stride()
    assert meta.untyped_storage().nbytes() == tensor.untyped_storage().nbytes()
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = ops.allocate_result(spec, "cpu")
    assert fake.stride() == (8 * 264, 264, 1)


@needs_engine_plan
def test_launch_out_refuses_a_result_without_its_padding(tmp_path):
    torch.manual_seed(0)
    module = Head().to(torch.bfloat16).eval()
    x = torch.randn(2, 8, 32, dtype=torch.bfloat16)
    optimize_eagerly(module, (x,), tmp_path, "native")
    plan = json.loads((tmp_path / "plan.json").read_text())
    call = next(c for r in plan["replacements"] for c in r.get("calls", [])
                if any(res["shape"][-1] == 257 for res in c["results"]))
    number = ops.register_call(call)
    spec = ops.registered_call(number)
    operands = [torch.zeros(o.shape, dtype=o.dtype).as_strided(o.shape, o.stride) for o in spec.operands]
    short = [torch.empty_strided(r.shape, r.stride, dtype=r.dtype) for r in spec.results]
    with pytest.raises(ValueError, match="alloc_shape"):
        torch.ops.fact.launch_out.default(operands, short, number)
    whole = [ops.allocate_result(r, "cpu") for r in spec.results]
    torch.ops.fact.launch_out.default(operands, whole, number)
    fresh = torch.ops.fact.launch.default(operands, number)
    assert fresh[0].stride() == spec.results[0].stride
    assert fresh[0].untyped_storage().nbytes() == ops.storage_elements(spec.results[0]) * 2
    # A view reaching past its allocation is refused when the call is parsed.
    bad = dict(call, results=[dict(call["results"][0], alloc_shape=[2, 8, 257])])
    with pytest.raises(ValueError, match="reaches past its alloc_shape"):
        ops.check_call(bad)
