"""fact::launch operands under the Inductor remainder: the compiled composed graph must hand every
call the layouts it was planned (and verified) with.

Regression for the phi3 crash (hf_phi3_decoder, bf16 native, H200: SIGSEGV in fact.optimize's
Inductor run of the composed graph). Phi-3 applies RoPE to the full head (partial_rotary_factor
1), so transformers builds q and k as `cat([q_rot, q[..., 96:]], -1)` with an EMPTY second part.
torch.export records the cat's result as contiguous [B, H, T, D] (what eager returns), and the
plan's bgemm_scale call was written for that. Inductor's decomposition turns a cat of one
non-empty tensor into a stride-preserving clone of it, i.e. the rotated q in the [B, T, H, D]
memory order of the fused QKV projection; fact::launch's needs_exact_strides tag then pins that
layout, not the plan's. compose now pins each planned dense operand layout in the graph itself
(fact.compose._pin_layout), and every fact::launch implementation refuses a pointer slot whose
tensor reaches outside its storage (fact.ops._check_slots, check_slots in
src/torch_ext/fact_launch_op.cpp).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import fact
import fact.ops
import fake_kind
from fact import conformance as conf
from fact.compose import engine_can_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
CAN_PLAN, WHY_NOT = engine_can_plan()


def _matches(tensor: torch.Tensor, spec) -> bool:
    return (tensor.dtype == spec.dtype and spec.shape is not None
            and tuple(tensor.shape) == spec.shape
            and all(size == 1 or got == want
                    for size, got, want in zip(tensor.shape, tensor.stride(), spec.stride)))


@pytest.mark.skipif(not CAN_PLAN, reason=f"no FACT engine to plan with: {WHY_NOT}")
@pytest.mark.slow
def test_phi3_inductor_remainder_passes_the_planned_layouts(tmp_path, monkeypatch):
    """hf_phi3_decoder in bf16 at CPU sizes with the Inductor remainder: the remainder compiles
    and runs (it fell back to eager: 'operand 0 has shape [2, 3, 16, 32] stride [1536, 32, 96,
    1], the call was planned for ... [1536, 512, 32, 1]'), every call the compiled graph makes
    gets operands with the shapes, strides and dtypes it was registered with (checked here
    independently of the op's own checks, whose failure compose swallows into the eager
    fallback), and the output meets the bf16 precision contract against float64."""
    module, model, inputs = conf.build_case(REPO_ROOT / "corpus" / "hf_phi3_decoder.py",
                                            "bfloat16", "cpu", "cpu", 0)
    seen: list[tuple[int, list[tuple]]] = []
    check = fact.ops._check_operands

    def recording_check(call, operands):
        seen.append((call.id, [(t, t.storage_offset()) for t in operands]))
        return check(call, operands)

    monkeypatch.setattr(fact.ops, "_check_operands", recording_check)
    with torch.no_grad():
        composed = fact.optimize(model, inputs, "native", work_dir=tmp_path, remainder="inductor")
    report = composed.fact_report
    if "Inductor compilation failed" in report.remainder and "fact::launch" not in report.remainder:
        pytest.skip(f"Inductor does not compile here: {report.remainder}")
    assert report.remainder == "inductor", report.remainder
    assert report.runs.startswith("composed"), report.runs
    kinds = {c.kind for entry in report.composed for c in entry.calls}
    assert len(report.composed) >= 4, [e.rule for e in report.composed]

    seen.clear()
    with torch.no_grad():
        out = composed(*inputs)
    assert composed.fact_report.remainder == "inductor"
    calls = {call_id for call_id, _ in seen}
    assert len(calls) == sum(len(entry.calls) for entry in report.composed), (calls, kinds)
    for call_id, operands in seen:
        spec = fact.ops.registered_call(call_id)
        for index, ((tensor, _offset), planned) in enumerate(zip(operands, spec.operands)):
            assert planned.shape is not None, f"{spec.describe()}: operand {index} has no layout"
            assert _matches(tensor, planned), (
                f"{spec.describe()}: operand {index} is {tensor.dtype} {list(tensor.shape)} "
                f"stride {list(tensor.stride())}, registered {planned.dtype} "
                f"{list(planned.shape)} stride {list(planned.stride)}")

    reference = conf.float64_output(model, inputs)
    with torch.no_grad():
        eager = model(*inputs)
    torch_error = conf.relative_error(eager, reference)
    error = conf.relative_error(out, reference)
    assert math.isfinite(error) and error <= conf.output_bound("native", torch_error), \
        (error, torch_error)


def test_a_slot_outside_its_storage_is_refused(reference):
    """An operand without a planned layout (never shape-checked) that claims more elements than
    its storage holds, as Inductor's reinterpret_tensor can make, is refused before the kernel
    (or the host reference) forms an address from it; so is an element offset past the end."""
    SHAPE = [4, 8]
    number = fact.ops.register_call(fake_kind.axpby_call("t", "x", "z", "y", SHAPE, 1.0, 1.0))
    small = torch.zeros(8)
    reinterpret = torch._C._dynamo.guards._reinterpret_tensor
    too_big = reinterpret(small, tuple(SHAPE), (8, 1), 0)
    z = torch.zeros(SHAPE)
    with pytest.raises(ValueError, match=r"operand 0 .* reaches outside its storage of 8 elements"):
        torch.ops.fact.launch([too_big, z], number)
    with pytest.raises(ValueError, match=r"operand 1 has no elements"):
        torch.ops.fact.launch([z, torch.zeros(0)], number)
    call = fake_kind.axpby_call("t", "x", "z", "y", SHAPE, 1.0, 1.0)
    call["args"]["pointers"][0]["element_offset"] = 32
    past_end = fact.ops.register_call(call)
    with pytest.raises(ValueError, match=r"pointer slot element offset 32\) reaches outside"):
        torch.ops.fact.launch([z, z], past_end)
    [y] = torch.ops.fact.launch([z, z], number)  # the same call with fitting operands runs
    assert torch.equal(y, torch.zeros(SHAPE))


def test_pinned_layouts_are_views_and_noops_eagerly():
    """_pin_layout inserts permute / contiguous / permute for a dense planned layout (a no-op
    when the value already has it), nothing for a view into a larger tensor."""
    from fact.compose import _dense_order
    assert _dense_order([2, 3, 16, 32], [1536, 512, 32, 1]) == [0, 1, 2, 3]
    assert _dense_order([2, 3, 16, 32], [1536, 32, 96, 1]) == [0, 2, 1, 3]
    assert _dense_order([2, 1, 16, 32], [512, 7, 32, 1]) is not None   # size-1 dim: any stride
    assert _dense_order([2, 16, 96], [4608, 288, 1]) is None           # V sliced out of QKV
