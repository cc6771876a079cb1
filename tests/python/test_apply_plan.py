"""fact.compose.apply_plan executing fact.plan/2 plans on the CPU, with no GPU and no engine:
the plans are written here for a made-up kind ("axpby", tests/python/fake_kind.py) whose host
reference the test builds, so nothing in python/fact can know what it computes.

Covered: insertion and a valid order again (adjacent, chained and out-of-order replacements,
outputs used between replaced nodes), several outputs, a call reading an
earlier call's result, a call with two results, parameters found by target, consistency
declines (dtype, shape, ABI version, unknown values, overlaps), verification of the
replacement against the subgraph it replaces (a corrupted argument image, a kernel that writes
half its output), pattern selection, the never-slower fallback with an injected
timer, and tracing the composed graph."""
import json
import struct
import warnings

import pytest
import torch

import fact.compose
import fake_kind
from fact.compose import apply_plan

LAUNCH = torch.ops.fact.launch.default
SHAPE = [4, 8]


def _inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(SHAPE, generator=generator), torch.randn(SHAPE, generator=generator)


def _launches(composed) -> int:
    return sum(1 for n in composed.graph_module.graph.nodes if n.target is LAUNCH)


def _aten(composed) -> list[str]:
    return [n.name for n in composed.graph_module.graph.nodes
            if n.op == "call_function" and n.target is not LAUNCH and "getitem" not in n.name]


def _assert_same_as(composed, module, seeds=(1, 2)):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the planned signature must not fall back
        for seed in seeds:
            x, z = _inputs(seed)
            torch.testing.assert_close(composed(x, z), module(x, z), rtol=1e-6, atol=1e-6)


class Chain(torch.nn.Module):
    """mul, mul_1, add | mul_2, mul_3, add_1 | relu, add_2."""

    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        w = 0.5 * y + -1.0 * z
        return torch.relu(w) + y


def _first(rid=0, a=2.0, b=3.0, **options):
    call = fake_kind.axpby_call(f"{rid}", "x", "z", "add", SHAPE, a, b, **options)
    return fake_kind.replacement(rid, ["mul", "mul_1", "add"], ["x", "z"], ["add"], [call])


def _second(rid=1):
    call = fake_kind.axpby_call(f"{rid}", "add", "z", "add_1", SHAPE, 0.5, -1.0)
    return fake_kind.replacement(rid, ["mul_2", "mul_3", "add_1"], ["add", "z"], ["add_1"], [call])


def _apply(tmp_path, module, replacements, inputs=None, **options):
    inputs = inputs or _inputs()
    folder = fake_kind.write_plan(tmp_path / "plan", inputs, replacements,
                                  **options.pop("plan", {}))
    options.setdefault("remainder", "eager")
    return apply_plan(module, inputs, folder, **options)


# --- insertion and order ----------------------------------------------------------------------


def test_adjacent_replacements_in_any_plan_order_compose_in_a_valid_order(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_second(), _first()])  # the reader listed first
    report = composed.fact_report
    assert [c.label for c in report.composed] == ["1", "0"], str(report)
    assert not report.left_to_pytorch, str(report)
    assert _launches(composed) == 2
    assert _aten(composed) == ["relu", "add_2"]  # every mul and add of the chain is gone
    composed.graph_module.graph.lint()
    _assert_same_as(composed, module)
    for c in report.composed:
        assert c.verified and c.rel_err is not None and c.rel_err <= c.tolerance == 1e-6


class Stack(torch.nn.Module):
    """Three adjacent axpby's, as a Linear/ReLU stack chains its GEMMs."""

    def forward(self, x, z):
        h = 2.0 * x + 3.0 * z
        h = 0.5 * h + 1.5 * z
        h = -1.0 * h + 0.25 * z
        return h


def test_a_stack_of_three_adjacent_replacements(tmp_path, reference):
    names = fake_kind.node_names(Stack(), _inputs())
    assert names == ["mul", "mul_1", "add", "mul_2", "mul_3", "add_1", "mul_4", "mul_5", "add_2"]
    steps = [("x", "add", 2.0, 3.0), ("add", "add_1", 0.5, 1.5), ("add_1", "add_2", -1.0, 0.25)]
    replacements = [
        fake_kind.replacement(i, names[3 * i:3 * i + 3], [source, "z"], [out],
                              [fake_kind.axpby_call(str(i), source, "z", out, SHAPE, a, b)])
        for i, (source, out, a, b) in enumerate(steps)]
    module = Stack()
    composed = _apply(tmp_path, module, [replacements[2], replacements[0], replacements[1]])
    assert len(composed.fact_report.composed) == 3, str(composed.fact_report)
    assert _aten(composed) == []
    _assert_same_as(composed, module)


class OutputUsedEarly(torch.nn.Module):
    """relu reads the first result before the second computation's nodes."""

    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z   # mul, mul_1, add
        r = torch.relu(y)       # relu
        q = 0.5 * x + 2.0 * z   # mul_2, mul_3, add_1
        return r + q            # add_2


def test_outputs_read_between_the_replaced_nodes_get_a_valid_order(tmp_path, reference):
    module = OutputUsedEarly()
    assert fake_kind.node_names(module, _inputs()) == ["mul", "mul_1", "add", "relu", "mul_2",
                                                       "mul_3", "add_1", "add_2"]
    calls = [fake_kind.axpby_call("0a", "x", "z", "add", SHAPE, 2.0, 3.0),
             fake_kind.axpby_call("0b", "x", "z", "add_1", SHAPE, 0.5, 2.0)]
    both = fake_kind.replacement(0, ["mul", "mul_1", "add", "mul_2", "mul_3", "add_1"],
                                 ["x", "z"], ["add", "add_1"], calls)
    composed = _apply(tmp_path, module, [both])
    report = composed.fact_report
    assert len(report.composed) == 1 and set(report.composed[0].errors) == {"add", "add_1"}, str(report)
    order = [n.name for n in composed.graph_module.graph.nodes]
    assert order.index("relu") > order.index("getitem")  # moved after the call that makes its input
    _assert_same_as(composed, module)


def test_a_call_reading_an_earlier_calls_result_with_two_outputs(tmp_path, reference):
    module = Chain()
    calls = [fake_kind.axpby_call("0a", "x", "z", "add", SHAPE, 2.0, 3.0),
             fake_kind.axpby_call("0b", "add", "z", "add_1", SHAPE, 0.5, -1.0)]
    chained = fake_kind.replacement(0, ["mul", "mul_1", "add", "mul_2", "mul_3", "add_1"],
                                    ["x", "z"], ["add", "add_1"], calls, label="0")
    composed = _apply(tmp_path, module, [chained])
    [entry] = composed.fact_report.composed
    assert [c.label for c in entry.calls] == ["0a", "0b"]
    assert _launches(composed) == 2 and _aten(composed) == ["relu", "add_2"]
    launches = [n for n in composed.graph_module.graph.nodes if n.target is LAUNCH]
    assert launches[1].args[0][0].args[0] is launches[0]  # 0b reads 0a's result
    _assert_same_as(composed, module)


class Pair(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z   # mul, mul_1, add
        p = x * z               # mul_2
        return y - p, p.sum()   # sub, sum_1


def test_one_call_with_two_results(tmp_path, reference):
    module = Pair()
    call = fake_kind.axpby_call("0", "x", "z", "add", SHAPE, 2.0, 3.0, w="mul_2")
    both = fake_kind.replacement(0, ["mul", "mul_1", "add", "mul_2"], ["x", "z"], ["add", "mul_2"], [call])
    composed = _apply(tmp_path, module, [both])
    assert len(composed.fact_report.composed) == 1, str(composed.fact_report)
    assert _launches(composed) == 1 and _aten(composed) == ["sub", "sum_1"]
    with torch.no_grad():
        x, z = _inputs(3)
        for got, want in zip(composed(x, z), module(x, z)):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)


class WithParameter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(SHAPE))

    def forward(self, x, z):
        return torch.tanh(2.0 * x + 3.0 * self.weight) + z


def test_parameters_are_found_by_target_and_keep_their_values(tmp_path, reference):
    torch.manual_seed(0)
    module = WithParameter()
    call = fake_kind.axpby_call("0", "x", "p_weight", "add", SHAPE, 2.0, 3.0)
    replaced = fake_kind.replacement(
        0, ["mul", "mul_1", "add"],
        ["x", {"value": "p_weight", "kind": "parameter", "target": "weight"}], ["add"], [call])
    composed = _apply(tmp_path, module, [replaced])
    assert len(composed.fact_report.composed) == 1, str(composed.fact_report)
    _assert_same_as(composed, module)
    # the composed graph reads the module's parameter, not a copy
    with torch.no_grad():
        module.weight.add_(1.0)
    _assert_same_as(composed, module, seeds=(4,))


# --- consistency declines ---------------------------------------------------------------------


def _declined(composed) -> dict:
    return {item.what.split()[0]: item.reason for item in composed.fact_report.left_to_pytorch}


def test_an_operand_dtype_that_differs_from_the_graph_is_declined(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_first(operand_dtype="torch.float64"), _second()])
    reason = _declined(composed)["0"]
    assert reason == "call 0: operand 0 (x) is torch.float32 in the graph, torch.float64 in the plan"
    assert [c.label for c in composed.fact_report.composed] == ["1"]
    _assert_same_as(composed, module)


def test_a_result_shape_that_differs_from_the_graph_is_declined(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_first(result_shape=[4, 9])])
    assert _declined(composed)["0"] == ("call 0: result add is torch.float32 [4, 8] stride [8, 1] "
                                        "in the graph, torch.float32 [4, 9] stride [9, 1] in the plan")
    assert composed.graph_module is None
    assert composed.fact_report.runs == "the original eagerly (nothing composed)"
    _assert_same_as(composed, module)


def test_other_inconsistencies_are_declined_with_the_difference(tmp_path, reference):
    module = Chain()
    old_abi = _first(rid=0)
    image = bytearray.fromhex(old_abi["calls"][0]["args"]["hex"])
    struct.pack_into("<I", image, 0, 1)
    old_abi["calls"][0]["args"]["hex"] = image.hex()
    unknown = fake_kind.replacement(1, ["relu"], ["nowhere"], ["relu"],
                                    [fake_kind.axpby_call("1", "nowhere", "z", "relu", SHAPE, 0.5, -1.0)])
    missing_node = fake_kind.replacement(2, ["mul_9"], ["x", "z"], ["mul_9"], [])
    overlap = _first(rid=3)
    inner = fake_kind.replacement(4, ["relu", "add_2"], ["relu", "add"], ["add_2"],
                                  [fake_kind.axpby_call("4", "relu", "add", "add_2", SHAPE, 1.0, 1.0)])
    crossing = fake_kind.replacement(7, ["add_1", "relu"], ["mul_2", "mul_3"], ["relu"],
                                     [fake_kind.axpby_call("7", "mul_2", "mul_3", "relu", SHAPE, 1.0, 1.0)])
    declined = fake_kind.replacement(5, ["relu"], ["add_1"], ["relu"], [], status="declined",
                                     reason="dtype float32 has no template")
    composed = _apply(tmp_path, module, [_second(rid=6), old_abi, unknown, missing_node, overlap,
                                         inner, declined, crossing])
    reasons = _declined(composed)
    assert reasons["0"] == ("call 0: the argument image is for kernel ABI version 1; this FACT "
                            "runs version 2")
    assert reasons["1"] == "input nowhere (activation) is not in the exported graph"
    assert reasons["2"] == "nodes not in the exported graph: mul_9"
    assert reasons["4"] == "input relu is computed by the replaced nodes themselves"
    assert reasons["7"] == "overlaps 6 axpby_rule at mul_2..add_1 at add_1"
    assert reasons["5"] == "declined: dtype float32 has no template"
    stages = {item.what.split()[0]: item.stage for item in composed.fact_report.left_to_pytorch}
    assert stages["0"] == "check" and stages["5"] == "plan"
    # 3 (the same nodes as 0) is composed: 0 was declined before it claimed them
    assert sorted(c.label for c in composed.fact_report.composed) == ["3", "6"]
    _assert_same_as(composed, module)


def test_inputs_other_than_the_planned_ones_and_unplanned_plans_leave_the_module(tmp_path, reference):
    module = Chain()
    folder = fake_kind.write_plan(tmp_path / "plan", _inputs(), [_first()])
    other = (torch.randn(2, 8), torch.randn(2, 8))
    composed = apply_plan(module, other, folder, remainder="eager")
    assert composed.graph_module is None
    assert "differ from the plan's" in composed.fact_report.left_to_pytorch[0].reason
    unplanned = fake_kind.write_plan(tmp_path / "unplanned", _inputs(), [], status="unplanned",
                                     reason="the engine found nothing")
    composed = apply_plan(module, _inputs(), unplanned, remainder="eager")
    assert composed.fact_report.left_to_pytorch[0].reason == "the engine found nothing"
    with pytest.raises(ValueError, match="not a fact.plan/2 plan"):
        (tmp_path / "old").mkdir()
        (tmp_path / "old" / "plan.json").write_text(json.dumps({"schema": "fact.plan/1"}))
        apply_plan(module, _inputs(), tmp_path / "old")


def test_without_a_host_reference_the_cpu_path_composes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("FACT_REFERENCE_LIBRARY", str(tmp_path / "missing.so"))
    composed = _apply(tmp_path, Chain(), [_first()])
    assert composed.graph_module is None
    assert "no host reference for the CPU path" in composed.fact_report.left_to_pytorch[0].reason


# --- verification of the replacement, not its description ---------------------------------------


def test_a_corrupted_argument_image_is_refused_by_verification(tmp_path, reference):
    """The plan's description says a=2 (like the graph); its argument image says a=2.5. A check
    built from the description would pass; the check against the replaced subgraph does not."""
    module = Chain()
    corrupted = _first()
    image = bytearray.fromhex(corrupted["calls"][0]["args"]["hex"])
    assert struct.unpack_from("<d", image, 32)[0] == 2.0
    struct.pack_into("<d", image, 32, 2.5)
    corrupted["calls"][0]["args"]["hex"] = image.hex()
    composed = _apply(tmp_path, module, [corrupted, _second()])
    reason = _declined(composed)["0"]
    assert reason.startswith("verification failed: output add: rel_err ")
    assert reason.endswith("above the tolerance 1.0e-06")
    assert [c.label for c in composed.fact_report.composed] == ["1"]
    _assert_same_as(composed, module)

    # without verification the wrong replacement would have been composed
    unchecked = _apply(tmp_path / "unchecked", module, [corrupted], verify=False)
    assert len(unchecked.fact_report.composed) == 1
    x, z = _inputs(5)
    with torch.no_grad():
        assert not torch.allclose(unchecked(x, z), module(x, z))


def test_a_kernel_that_writes_half_its_output_is_caught_by_the_poison(tmp_path, reference):
    module = Chain()
    half = _first(kind="axpby_half")
    composed = _apply(tmp_path, module, [half])
    assert _declined(composed)["0"] == ("verification failed: output add: 16 of 32 elements not "
                                        "written (still NaN after the call)")
    _assert_same_as(composed, module)


class Masked(torch.nn.Module):
    def forward(self, x, z, mask):
        return torch.tanh(2.0 * (x * mask) + 3.0 * z)  # mul, mul_1, mul_2, add, tanh


@pytest.mark.parametrize("mask_value,passes", [(1, True), (0, False)])
def test_integer_inputs_keep_their_example_values_in_the_check(tmp_path, reference, mask_value, passes):
    """The replaced subgraph reads an integer mask; the check keeps its example value (floating
    activations get fresh random values). With an all-ones mask 2*(x*mask) + 3*z is axpby(2, 3);
    with an all-zeros mask it is not, and the check must see that."""
    module = Masked()
    x, z = _inputs()
    mask = torch.full(SHAPE, mask_value, dtype=torch.int64)
    call = fake_kind.axpby_call("0", "x", "z", "add", SHAPE, 2.0, 3.0)
    replaced = fake_kind.replacement(0, ["mul", "mul_1", "mul_2", "add"], ["x", "z", "mask"],
                                     ["add"], [call])
    folder = fake_kind.write_plan(tmp_path / "plan", (x, z, mask), [replaced])
    composed = apply_plan(module, (x, z, mask), folder, remainder="eager")
    assert bool(composed.fact_report.composed) == passes, str(composed.fact_report)
    if not passes:
        assert _declined(composed)["0"].startswith("verification failed: output add: rel_err ")
    with torch.no_grad():
        fresh_x, fresh_z = _inputs(9)
        torch.testing.assert_close(composed(fresh_x, fresh_z, mask), module(fresh_x, fresh_z, mask))


def test_the_report_has_each_replacement_measured_error_and_tolerance(tmp_path, reference):
    composed = _apply(tmp_path, Chain(), [_first(), _second()], report_path=tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["label"] for c in report["composed"]] == ["0", "1"]
    for entry in report["composed"]:
        assert entry["verified"] and 0 <= entry["rel_err"] <= entry["tolerance"] == 1e-6
        assert entry["calls"][0]["summary"].startswith("axpby 32")
        assert entry["calls"][0]["config"] == "host" and entry["calls"][0]["config_source"] == "default"
    assert report["op_implementation"].startswith("host reference (fact_reference_call in ")
    assert str(composed.fact_report).count("\n  composed ") == 2


# --- selection ----------------------------------------------------------------------------------


def test_patterns_select_by_rule_and_by_pattern_name(tmp_path, reference):
    module = Chain()
    other = _second()
    other["rule"], other["pattern"] = "scale_add", "scaled"
    plan = [_first(), other]
    by_rule = _apply(tmp_path / "a", module, plan, patterns="axpby_rule")
    assert [c.label for c in by_rule.fact_report.composed] == ["0"]
    assert _declined(by_rule)["1"] == "not selected (patterns=axpby_rule)"
    by_pattern = _apply(tmp_path / "b", module, plan, patterns=["scaled", "nothing"])
    assert [c.label for c in by_pattern.fact_report.composed] == ["1"]
    assert _declined(by_pattern)["0"] == "not selected (patterns=nothing, scaled)"
    assert "patterns: 'nothing' names no replacement of this module" in by_pattern.fact_report.notes
    in_plan = _apply(tmp_path / "c", module, plan, plan={"patterns": ["scale_add"]})
    assert [c.label for c in in_plan.fact_report.composed] == ["1"]
    for composed in (by_rule, by_pattern, in_plan):
        _assert_same_as(composed, module)


# --- never slower than doing nothing -------------------------------------------------------------


class _CompiledModule:
    """What the stand-in torch.compile returns: calls the module and, like torch's
    OptimizedModule, forwards len() to it, so that truth testing it raises TypeError for a
    module without __len__ (`compiled or module` broke the GPU guard on 2026-11-26)."""

    def __init__(self, module, calls):
        self.module, self.calls = module, calls

    def __call__(self, *args):
        self.calls.append(self.module)
        return self.module(*args)

    def __len__(self):
        raise TypeError(f"{type(self.module).__name__} does not support len()")


class _Compiled:
    """Stands in for torch.compile (Inductor is slow on this machine): calls the module."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self, module, **options):
        return _CompiledModule(module, self.calls)


def test_a_slower_composed_module_falls_back_to_the_compiled_original(tmp_path, reference, monkeypatch):
    compiled_calls = []
    monkeypatch.setattr(torch, "compile", _Compiled(compiled_calls))
    module = Chain()
    timings = iter([2.0, 1.0, 3.0])  # the composed forward, the compiled original, the original eagerly
    composed = _apply(tmp_path, module, [_first()], speed_guard=lambda fn: (fn(), next(timings))[1])
    report = composed.fact_report
    assert report.speed == {"composed_ms": 2.0, "original_ms": 1.0, "eager_ms": 3.0,
                            "original": "torch.compile of the original", "threshold": 1.02}
    assert report.runs.startswith("torch.compile of the original: the composed module took 2 ms")
    assert len(report.composed) == 1  # still reported: composed, verified, not the fastest
    compiled_calls.clear()
    _assert_same_as(composed, module, seeds=(1,))
    assert compiled_calls == [module]

    faster = iter([1.0, 1.5, 1.2])
    kept = _apply(tmp_path / "kept", module, [_first()], speed_guard=lambda fn: (fn(), next(faster))[1])
    assert kept.fact_report.runs == "composed (1 ms; torch.compile of the original 1.5 ms; eagerly 1.2 ms)"
    compiled_calls.clear()
    _assert_same_as(kept, module, seeds=(1,))
    assert compiled_calls == []
    within = iter([1.015, 1.0, 1.0])  # slower by less than 2%: kept
    assert _apply(tmp_path / "within", module, [_first()],
                  speed_guard=lambda fn: next(within)).fact_report.runs.startswith("composed")


def test_the_never_slower_check_times_the_composed_module_as_a_user_calls_it(tmp_path, reference,
                                                                           monkeypatch):
    """The composed candidate goes through the module's call (signature guard, state and
    derived-operand checks), whose host work counts where launches bound a call, not through
    its inner forward alone."""
    from fact.compose.module import ComposedModule
    monkeypatch.setattr(torch, "compile", _Compiled([]))
    called = []
    original_forward = ComposedModule.forward

    def counting_forward(self, *args, **kwargs):
        called.append(len(args))
        return original_forward(self, *args, **kwargs)

    monkeypatch.setattr(ComposedModule, "forward", counting_forward)
    timings = iter([1.0, 1.5, 1.2])
    seen = []

    def timer(fn):
        before = len(called)
        fn()
        seen.append(len(called) - before)
        return next(timings)

    _apply(tmp_path, Chain(), [_first()], speed_guard=timer)
    assert seen == [1, 0, 0]  # the composed candidate called the module; the others did not


def test_a_slower_composed_module_falls_back_to_the_original_when_eager_is_fastest(
        tmp_path, reference, monkeypatch):
    """A small module can run faster eagerly than compiled: the fallback is the faster of the two."""
    compiled_calls = []
    monkeypatch.setattr(torch, "compile", _Compiled(compiled_calls))
    module = Chain()
    timings = iter([2.0, 1.5, 1.0])
    composed = _apply(tmp_path, module, [_first()], speed_guard=lambda fn: (fn(), next(timings))[1])
    report = composed.fact_report
    assert report.runs.startswith("the original eagerly: the composed module took 2 ms")
    assert report.speed["eager_ms"] == 1.0 and report.speed["original_ms"] == 1.5
    compiled_calls.clear()
    _assert_same_as(composed, module, seeds=(1,))
    assert compiled_calls == []  # the original itself runs, not its compiled version
    close = iter([2.0, 1.0, 0.99])  # eager faster than compiled by less than 2%: compiled
    again = _apply(tmp_path / "close", module, [_first()], speed_guard=lambda fn: next(close))
    assert again.fact_report.runs.startswith("torch.compile of the original: the composed module")


def test_a_never_slower_check_that_cannot_time_warns_and_keeps_the_composed_module(tmp_path, reference, monkeypatch):
    monkeypatch.setattr(torch, "compile", _Compiled([]))
    module = Chain()

    def broken_timer(fn):
        raise TypeError("Model does not support len()")

    with pytest.warns(RuntimeWarning, match="never-slower check not done: TypeError"):
        composed = _apply(tmp_path, module, [_first()], speed_guard=broken_timer)
    report = composed.fact_report
    assert report.runs == "composed" and report.speed is None
    assert "never-slower check not done: TypeError: Model does not support len()" in report.notes
    _assert_same_as(composed, module, seeds=(1,))


def test_nothing_composed_runs_the_faster_of_compiled_and_eager(tmp_path, reference, monkeypatch):
    compiled_calls = []
    monkeypatch.setattr(torch, "compile", _Compiled(compiled_calls))
    module = Chain()
    timings = iter([0.08, 0.04])  # torch.compile of the original, then the original eagerly
    composed = _apply(tmp_path, module, [_first(kind="axpby_half")], remainder="inductor",
                      speed_guard=lambda fn: (fn(), next(timings))[1])
    report = composed.fact_report
    assert composed.graph_module is None
    assert report.runs == "the original eagerly (nothing composed; 0.04 ms, torch.compile of it 0.08 ms)"
    assert report.speed["eager_ms"] == 0.04 and report.speed["original_ms"] == 0.08
    compiled_calls.clear()
    _assert_same_as(composed, module, seeds=(1,))
    assert compiled_calls == []
    slower = iter([0.04, 0.08])
    kept = _apply(tmp_path / "compiled", module, [_first(kind="axpby_half")], remainder="inductor",
                  speed_guard=lambda fn: (fn(), next(slower))[1])
    assert kept.fact_report.runs == "torch.compile of the original (nothing composed)"


def test_nothing_composed_runs_torch_compile_of_the_original(tmp_path, reference, monkeypatch):
    compiled_calls = []
    monkeypatch.setattr(torch, "compile", _Compiled(compiled_calls))
    module = Chain()
    composed = _apply(tmp_path, module, [_first(kind="axpby_half")], remainder="inductor")
    assert composed.graph_module is None
    assert composed.fact_report.runs == "torch.compile of the original (nothing composed)"
    assert composed.fact_report.remainder == "inductor"
    compiled_calls.clear()
    _assert_same_as(composed, module, seeds=(1,))
    assert compiled_calls == [module]
    with torch.no_grad():  # another signature: the original itself, no warning needed
        x = torch.randn(2, 8)
        torch.testing.assert_close(composed(x, x), module(x, x))

    def broken(module, **options):
        raise RuntimeError("no compiler here\nsecond line")

    monkeypatch.setattr(torch, "compile", broken)
    eager = _apply(tmp_path / "eager", module, [], remainder="inductor")
    assert eager.fact_report.runs == ("the original eagerly (nothing composed; Inductor compilation "
                                      "failed: RuntimeError: no compiler here)")
    _assert_same_as(eager, module, seeds=(1,))


# --- running the composed graph ------------------------------------------------------------------


def test_the_composed_graph_traces_and_guards_its_signature(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_first(), _second()])
    x, z = _inputs(7)
    compiled = torch.compile(composed.graph_module, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, z), module(x, z))
    exported = torch.export.export(composed.graph_module, (x, z), strict=False)
    calls = [n for n in exported.graph.nodes if n.target is LAUNCH]
    assert len(calls) == 2
    transposed = torch.randn(8, 4).t()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = composed(transposed, z)
        composed(transposed, z)
    fallbacks = [w for w in caught if "running the original module" in str(w.message)]
    assert len(fallbacks) == 1 and "strides" in str(fallbacks[0].message)
    torch.testing.assert_close(got, module(transposed, z))


@pytest.mark.slow
def test_inductor_remainder_around_the_launch_calls(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_first(), _second()], remainder="inductor",
                      speed_guard=False)
    assert composed.fact_report.remainder == "inductor", str(composed.fact_report)
    assert composed._compiled is not None
    assert "speed_guard=False: not compared with torch.compile of the original" in composed.fact_report.notes
    _assert_same_as(composed, module)
