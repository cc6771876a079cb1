"""fact.compose.apply_plan with a plan over declared symbols (docs/dynamic_shapes.md), on the
CPU with the fake kind's host reference: the calls get the symbols' sizes from the inputs
(aten.sym_size.int), result shapes are checked symbolically, each replacement is verified at
several sizes, the composed module serves every size in the range and falls back outside it,
and the never-slower check runs per bucket tuple."""
import json
import warnings

import pytest
import torch

import fake_kind
from fact.compose import apply_plan
from fact.compose.bucket_speed import never_slower_per_bucket

LAUNCH = torch.ops.fact.launch.default
BATCH = fake_kind.size("batch", (1, 1))


class Chain(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        return torch.relu(y) + x


def _plan(tmp_path, call, result_shape=None, symbol=None):
    replacement = fake_kind.replacement(0, ["mul", "mul_1", "add"], ["x", "z"], ["add"], [call])
    if result_shape is not None:
        call["results"][0]["shape"] = result_shape
    folder = tmp_path / "plan"
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"schema": "fact.plan/2", "abi_version": 2, "precision": "strict", "device": "cpu",
           "symbols": [symbol or fake_kind.batch_symbol(hint=4)],
           "inputs": [{"shape": [BATCH, 8], "dtype": "torch.float32"}] * 2,
           "status": "planned", "reason": "", "capture": "torch.export", "patterns": None,
           "kernels": {}, "replacements": [replacement], "notes": []}
    (folder / "plan.json").write_text(json.dumps(doc))
    return folder


def _apply(tmp_path, call=None, **options):
    call = call or fake_kind.symbolic_axpby_call("0", "x", "z", "add", 8, 2.0, 3.0)
    options.setdefault("remainder", "eager")
    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    return apply_plan(Chain(), inputs, _plan(tmp_path, call, options.pop("result_shape", None),
                                             options.pop("symbol", None)), **options)


def test_every_size_in_the_range_runs_the_calls(tmp_path, reference):
    composed = _apply(tmp_path)
    report = composed.fact_report
    assert [c.verified for c in report.composed] == [True], report
    [launch] = [n for n in composed.graph_module.graph.nodes if n.target is LAUNCH]
    assert [str(s.target) for s in launch.args[2]] == ["aten.sym_size.int"]
    assert not any(n.name == "mul" for n in composed.graph_module.graph.nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch in (1, 3, 4, 5, 8):
            x, z = torch.randn(batch, 8), torch.randn(batch, 8)
            torch.testing.assert_close(composed(x, z), Chain()(x, z))
    assert report.symbols[0]["name"] == "batch"


def test_outside_the_range_warns_and_runs_the_original(tmp_path, reference):
    composed = _apply(tmp_path)
    x, z = torch.randn(9, 8), torch.randn(9, 8)
    with pytest.warns(UserWarning, match="batch=9 is outside batch in 1..8"):
        torch.testing.assert_close(composed(x, z), Chain()(x, z))
    strict = _apply(tmp_path, strict=True)
    with pytest.raises(ValueError, match="outside the plan"):
        strict(x, z)


def test_a_wrong_bucket_image_fails_verification_at_its_size(tmp_path, reference):
    call = fake_kind.symbolic_axpby_call("0", "x", "z", "add", 8, 2.0, 3.0, bucket_a={0: 5.0})
    composed = _apply(tmp_path, call)
    [left] = composed.fact_report.left_to_pytorch
    assert left.stage == "verify" and "at batch=1 (all at their minimum)" in left.reason, left


def test_result_shapes_are_compared_symbolically(tmp_path, reference):
    composed = _apply(tmp_path, result_shape=[fake_kind.size("2*batch", (2, 1)), 8])
    [left] = composed.fact_report.left_to_pytorch
    assert left.stage == "check" and "2*batch" in left.reason and "[s" in left.reason, left


def test_the_remainder_compiles_with_symbolic_shapes(tmp_path, reference):
    composed = _apply(tmp_path, remainder="inductor")
    assert composed.fact_report.remainder.startswith("inductor (symbolic shapes, warmed at 4"), \
        composed.fact_report.remainder
    import torch._dynamo.utils as dynamo_utils
    before = dict(dynamo_utils.counters["stats"])
    with torch.no_grad():  # as it was warmed (grad mode is part of dynamo's guards)
        for batch in (3, 6, 7):
            x, z = torch.randn(batch, 8), torch.randn(batch, 8)
            torch.testing.assert_close(composed(x, z), Chain()(x, z))
    assert dict(dynamo_utils.counters["stats"]).get("unique_graphs") == before.get("unique_graphs")


def test_never_slower_per_bucket_keeps_a_fallback_per_bucket(tmp_path, reference):
    composed = _apply(tmp_path, speed_guard=False)
    from fact.compose.bucket_speed import edge_inputs
    from fact.compose.dynamic_plan import SymbolBinding
    from fact.symbolic_sizes import BucketTable
    table = composed._bucket_table
    binding = SymbolBinding({"symbols": [fake_kind.batch_symbol(hint=4)]}, composed.range_guard,
                            composed.graph_module)
    buckets = edge_inputs(binding, table, (torch.randn(4, 8), torch.randn(4, 8)))
    assert [sizes for _, sizes, _ in buckets] == [(1,), (2,), (4,), (8,)]
    rows = iter(range(4))

    def timer(candidates):  # the composed module is slow in the bucket of batch 8 only
        row = next(rows)
        return {"composed": 5.0 if row == 3 else 1.0, "eager": 2.0}

    never_slower_per_bucket(composed, composed.original, None, buckets, binding, timer, 1.02)
    assert [b["runs"] for b in composed.fact_report.buckets] == ["composed"] * 3 + ["the original eagerly"]
    assert set(composed._bucket_fallbacks) == {3}
    calls = []
    composed.original.register_forward_hook(lambda *args: calls.append(1))
    composed(torch.randn(6, 8), torch.randn(6, 8))   # bucket 3: the original
    composed(torch.randn(3, 8), torch.randn(3, 8))   # bucket 2: composed
    assert len(calls) == 1
    assert "composed in 3 of 4 timed bucket tuple(s)" in composed.fact_report.runs


class ReadsAnIntermediate(torch.nn.Module):
    def forward(self, x, z):
        r = torch.relu(x)
        return 2.0 * r + 3.0 * z


def test_an_intermediate_operand_is_pinned_to_its_planned_layout(tmp_path, reference):
    call = fake_kind.symbolic_axpby_call("0", "relu", "z", "add", 8, 2.0, 3.0)
    replacement = fake_kind.replacement(0, ["mul", "mul_1", "add"], ["relu", "z"], ["add"], [call])
    folder = _plan(tmp_path, call)
    doc = json.loads((folder / "plan.json").read_text())
    doc["replacements"] = [replacement]
    (folder / "plan.json").write_text(json.dumps(doc))
    composed = apply_plan(ReadsAnIntermediate(), (torch.randn(4, 8), torch.randn(4, 8)), folder,
                          remainder="eager")
    assert [c.verified for c in composed.fact_report.composed] == [True], composed.fact_report
    targets = [str(n.target) for n in composed.graph_module.graph.nodes]
    assert "aten.contiguous.default" in targets
    for batch in (1, 7):
        x, z = torch.randn(batch, 8), torch.randn(batch, 8)
        torch.testing.assert_close(composed(x, z), ReadsAnIntermediate()(x, z))


def test_verification_assignments(reference):
    from fact.compose.dynamic_plan import SymbolBinding
    symbols = [fake_kind.batch_symbol(low=1, high=64, hint=16),
               {"name": "seq", "min": 8, "max": 64, "hint": 16, "multiple": 8}]
    binding = SymbolBinding.__new__(SymbolBinding)
    binding.symbols = symbols
    assert binding.assignments(on_gpu=False) == [
        ("hint", (16, 16)), ("all at their minimum", (1, 8)), ("not a multiple of 8", (15, 16))]
    assert binding.assignments(on_gpu=True)[-1] == ("all at their maximum", (64, 64))


def test_a_maximum_too_large_for_the_float64_check_is_checked_at_the_largest_that_fits(
        tmp_path, reference, monkeypatch):
    """The float64 reference at the maximum runs out of memory: the symbol is checked at the
    largest halving toward the hint that fits, and the report says so. A wrong result there
    still fails."""
    from fact import verify
    from fact.compose.dynamic_plan import SymbolBinding
    on_cpu = SymbolBinding.assignments
    monkeypatch.setattr(SymbolBinding, "assignments", lambda self, on_gpu: on_cpu(self, True))
    run = verify.float64_run
    checked = []

    def float64_run(module, inputs):
        batch = inputs[0].shape[0]
        if batch >= 32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
        checked.append(batch)
        return run(module, inputs)
    monkeypatch.setattr(verify, "float64_run", float64_run)
    symbol = fake_kind.batch_symbol(high=64, hint=4, edges=(1, 2, 4, 8, 16, 32, 64))
    edges = tuple(symbol["edges"])
    composed = _apply(tmp_path, fake_kind.symbolic_axpby_call("0", "x", "z", "add", 8, 2.0, 3.0, edges=edges),
                      symbol=symbol)
    report = composed.fact_report
    assert [c.verified for c in report.composed] == [True], report
    assert 16 in checked and max(checked) == 16, checked
    notes = "\n".join(report.notes)
    assert "batch=64 (all at their maximum) does not fit in memory" in notes, notes
    assert "checked at batch=16" in notes, notes
    # a wrong result at the size that fits is still a failure
    call = fake_kind.symbolic_axpby_call("0", "x", "z", "add", 8, 2.0, 3.0, edges=edges, bucket_a={4: 5.0})
    composed = _apply(tmp_path / "wrong", call, symbol=symbol)
    [left] = composed.fact_report.left_to_pytorch
    assert left.stage == "verify" and "at batch=16" in left.reason, left
