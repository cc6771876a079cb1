"""The per-replacement speed check (fact.replacement_speed, apply_plan's `replacement_guard`):
a verified replacement whose calls are slower than PyTorch's run of the subgraph it replaces is
left to PyTorch with stage "speed"; faster ones are kept with both times in the report.

On the CPU with injected timers and the fake "axpby" kind (tests/python/fake_kind.py): what is
left and kept, the 2% threshold, the report's JSON and text, that the timed functions run the
calls and the subgraph on the same inputs (chained calls included), example values for integer
inputs without verification, a failing timer, and when the check runs (replacement_guard
False / None following speed_guard / True on the CPU). On a GPU (skipped elsewhere): the fake
kind's CUDA kernel timed with CUDA graphs against eager PyTorch, a replacement forced slower
by a timer, and a real bf16 model planned by the engine."""
import json

import pytest
import torch

import fact.compose
import fake_kind
from test_apply_plan import (SHAPE, Chain, Masked, _apply, _assert_same_as, _Compiled, _first,
                             _inputs, _second)
from test_compose_gpu import cuda_kind_library  # noqa: F401 - a fixture: the fake kind's CUDA library
from test_compose_plan import needs_engine_plan

LAUNCH = torch.ops.fact.launch.default
SLOWER_REASON = "slower than PyTorch's own run of the subgraph: "


def _timer(*times, outputs=None):
    """A timer returning `times` in order; it runs each function it is given once (what the
    replacement guard hands it must really run), keeping what it returns in `outputs`."""
    remaining = iter(times)

    def timer(fn):
        returned = fn()
        if outputs is not None:
            outputs.append(returned)
        return next(remaining)
    return timer


def _counting_timer(count: list, ms: float = 1.0):
    def timer(fn):
        count.append(fn)
        return ms
    return timer


def _launches(composed) -> int:
    if composed.graph_module is None:
        return 0
    return sum(1 for n in composed.graph_module.graph.nodes if n.target is LAUNCH)


# --- on the CPU, with injected timers ----------------------------------------------------------


def test_a_replacement_slower_than_its_subgraph_is_left_and_a_faster_one_kept(tmp_path, reference):
    module = Chain()
    timer = _timer(2.0, 1.0,   # replacement 0: calls 2 ms, subgraph 1 ms
                   1.0, 1.5)   # replacement 1: calls 1 ms, subgraph 1.5 ms
    composed = _apply(tmp_path, module, [_first(), _second()], speed_guard=False,
                      replacement_guard=timer, report_path=tmp_path / "report.json")
    report = composed.fact_report
    [left] = report.left_to_pytorch
    assert (left.replacement, left.stage) == (0, "speed"), str(report)
    assert left.reason == SLOWER_REASON + "2 ms vs 1 ms"
    [kept] = report.composed
    assert kept.label == "1" and kept.verified, str(report)
    assert (kept.calls_ms, kept.subgraph_ms, kept.timing) == (1.0, 1.5, "the given timer")
    assert _launches(composed) == 1
    assert {"mul", "mul_1", "add"} <= {n.name for n in composed.graph_module.graph.nodes}
    _assert_same_as(composed, module)

    written = json.loads((tmp_path / "report.json").read_text())
    assert [(c["label"], c["calls_ms"], c["subgraph_ms"], c["timing"]) for c in written["composed"]] \
        == [("1", 1.0, 1.5, "the given timer")]
    assert [(i["replacement"], i["stage"]) for i in written["left_to_pytorch"]] == [(0, "speed")]
    text = str(report)
    assert ", calls 1 ms vs subgraph 1.5 ms):" in text
    assert f"left to PyTorch: 0 axpby_rule at mul..add: {SLOWER_REASON}2 ms vs 1 ms" in text


def test_slower_by_at_most_two_percent_is_kept(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_first(), _second()], speed_guard=False,
                      replacement_guard=_timer(1.015, 1.0,    # 0: 1.5% slower: kept
                                               1.03, 1.0))    # 1: 3% slower: left
    report = composed.fact_report
    assert [c.label for c in report.composed] == ["0"], str(report)
    assert [(i.replacement, i.stage) for i in report.left_to_pytorch] == [(1, "speed")]
    _assert_same_as(composed, module)


def test_everything_slower_leaves_the_module_as_it_was(tmp_path, reference):
    module = Chain()
    composed = _apply(tmp_path, module, [_first(), _second()], speed_guard=False,
                      replacement_guard=_timer(3.0, 1.0, 3.0, 1.0))
    assert composed.graph_module is None
    assert [i.stage for i in composed.fact_report.left_to_pytorch] == ["speed", "speed"]
    assert composed.fact_report.runs == "the original eagerly (nothing composed)"
    _assert_same_as(composed, module)


def test_the_timed_calls_and_subgraph_run_on_the_same_inputs(tmp_path, reference):
    """Two chained calls (0b reads 0a's result): what the calls wrote equals what the subgraph
    returns, so both ran, on the same inputs, with the chain intact."""
    calls = [fake_kind.axpby_call("0a", "x", "z", "add", SHAPE, 2.0, 3.0),
             fake_kind.axpby_call("0b", "add", "z", "add_1", SHAPE, 0.5, -1.0)]
    chained = fake_kind.replacement(0, ["mul", "mul_1", "add", "mul_2", "mul_3", "add_1"],
                                    ["x", "z"], ["add", "add_1"], calls)
    outputs = []
    composed = _apply(tmp_path, Chain(), [chained], speed_guard=False,
                      replacement_guard=_timer(1.0, 2.0, outputs=outputs))
    assert len(composed.fact_report.composed) == 1, str(composed.fact_report)
    written, subgraph_outputs = outputs
    torch.testing.assert_close(written["add"], subgraph_outputs[0])
    torch.testing.assert_close(written["add_1"], subgraph_outputs[1])
    x, z = _inputs()
    assert not torch.equal(written["x"], x)  # fresh random activations, as the float64 check gives


def test_integer_inputs_get_their_example_values_without_verification(tmp_path, reference):
    """The example values are computed for the speed check when verify is off too."""
    x, z = _inputs()
    mask = torch.ones(SHAPE, dtype=torch.int64)
    call = fake_kind.axpby_call("0", "x", "z", "add", SHAPE, 2.0, 3.0)
    replaced = fake_kind.replacement(0, ["mul", "mul_1", "mul_2", "add"], ["x", "z", "mask"],
                                     ["add"], [call])
    folder = fake_kind.write_plan(tmp_path / "plan", (x, z, mask), [replaced])
    composed = fact.compose.apply_plan(Masked(), (x, z, mask), folder, remainder="eager",
                                       verify=False, speed_guard=False,
                                       replacement_guard=_timer(1.0, 2.0))
    [entry] = composed.fact_report.composed
    assert (entry.calls_ms, entry.subgraph_ms) == (1.0, 2.0), str(composed.fact_report)
    assert not [n for n in composed.fact_report.notes if "without timing" in n]


def test_under_an_inductor_remainder_inductors_subgraph_decides(tmp_path, reference, monkeypatch):
    """With the remainder compiled by Inductor, a replacement slower than eager's subgraph is
    timed again against Inductor's compilation of that subgraph (what would run instead): kept
    when not slower than it, with all three times in the report; left when slower than both."""
    compiled_calls = []
    monkeypatch.setattr(torch, "compile", _Compiled(compiled_calls))
    module = Chain()
    timer = _timer(2.0, 1.0, 2.0, 2.5,   # replacement 0: slower than eager's, not Inductor's
                   1.0, 1.5)             # replacement 1: faster than eager's: not timed again
    composed = _apply(tmp_path, module, [_first(), _second()], speed_guard=False,
                      replacement_guard=timer, remainder="inductor")
    report = composed.fact_report
    assert not report.left_to_pytorch, str(report)
    first, second = sorted(report.composed, key=lambda c: c.label)
    assert (first.calls_ms, first.subgraph_ms, first.compiled_subgraph_ms) == (2.0, 1.0, 2.5)
    assert "not than Inductor's (2 vs 2.5 ms)" in first.timing
    assert (second.compiled_subgraph_ms, second.timing) == (None, "the given timer")
    assert "ms eager, 2.5 ms compiled by Inductor" in str(report)
    _assert_same_as(composed, module)

    slower = _timer(2.0, 1.0, 2.0, 1.5, 1.0, 1.5)
    left = _apply(tmp_path / "left", module, [_first(), _second()], speed_guard=False,
                  replacement_guard=slower, remainder="inductor").fact_report
    [item] = left.left_to_pytorch
    assert item.stage == "speed" and item.replacement == 0
    assert item.reason == (SLOWER_REASON + "2 ms vs 1 ms, and than Inductor's compilation of it: "
                           "2 ms vs 1.5 ms")


def test_a_replacement_whose_timing_fails_is_kept_with_a_note(tmp_path, reference):
    def failing(fn):
        raise RuntimeError("CUDA out of memory\nmore")

    module = Chain()
    composed = _apply(tmp_path, module, [_first()], speed_guard=False, replacement_guard=failing)
    [entry] = composed.fact_report.composed
    assert entry.calls_ms is None and entry.subgraph_ms is None and entry.timing == ""
    assert not composed.fact_report.left_to_pytorch
    assert ("0 axpby_rule at mul..add: kept without timing it against the subgraph it replaces "
            "(RuntimeError: CUDA out of memory)") in composed.fact_report.notes
    _assert_same_as(composed, module)


@pytest.mark.parametrize("replacement_guard", [False, None, True])
def test_on_the_cpu_only_a_given_timer_times_the_replacements(tmp_path, reference, monkeypatch,
                                                              replacement_guard):
    """False: off; None: follows speed_guard (on here, but only on CUDA); True: CUDA only. The
    whole-module guard's own timer (a callable speed_guard) is not used per replacement."""
    monkeypatch.setattr(torch, "compile", _Compiled([]))
    module_timings = []
    composed = _apply(tmp_path, Chain(), [_first()], replacement_guard=replacement_guard,
                      speed_guard=_counting_timer(module_timings))
    report = composed.fact_report
    assert len(module_timings) == 3  # the composed forward, the compiled and the eager original, nothing else
    [entry] = report.composed
    assert entry.calls_ms is None and entry.subgraph_ms is None and entry.timing == ""
    assert not report.left_to_pytorch
    assert not [note for note in report.notes if "replacement" in note or "timing" in note]


def test_replacement_guard_none_follows_speed_guard():
    timer = _counting_timer([])
    resolve = fact.compose._replacement_timer
    # (replacement_guard, speed_guard, on_gpu) -> (time each replacement, the timer)
    assert resolve(None, True, True) == (True, None)
    assert resolve(None, timer, True) == (True, None)   # the default CUDA-graph timing, not speed_guard's timer
    assert resolve(None, False, True) == (False, None)
    assert resolve(None, True, False) == (False, None)
    assert resolve(True, False, True) == (True, None)
    assert resolve(False, True, True) == (False, None)
    assert resolve(timer, False, False) == (True, timer)


# --- on a GPU -------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (GPU tests run on the device host)")
BIG = [2048, 4096]  # memory-bound: one axpby pass (3 tensors) against mul, mul, add (7 tensors)


class Axpby(torch.nn.Module):
    def forward(self, x, z):
        return 2.0 * x + 3.0 * z   # mul, mul_1, add


def _cuda_inputs(seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(BIG, device="cuda", generator=generator) for _ in range(2))


def _cuda_plan(folder, library):
    kernels = {"axpbykey": {"name": "axpby_cuda", "kind": "axpby", "pattern": "axpby",
                            "entry": "fact_axpby_cuda", "library": str(library), "status": "built",
                            "reason": ""}}
    call = fake_kind.axpby_call("0", "x", "z", "add", BIG, 2.0, 3.0, kernel="axpbykey")
    replaced = fake_kind.replacement(0, ["mul", "mul_1", "add"], ["x", "z"], ["add"], [call])
    return fake_kind.write_plan(folder, _cuda_inputs(0), [replaced], device="cuda", kernels=kernels)


def _assert_same_on_cuda(composed, module):
    x, z = _cuda_inputs(1)
    with torch.no_grad():
        torch.testing.assert_close(composed(x, z), module(x, z), rtol=1e-6, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.timed  # asserts the kernel reads faster than its subgraph
@needs_cuda
def test_on_the_gpu_a_faster_kernel_is_kept_with_both_times(tmp_path, cuda_kind_library):
    module = Axpby()
    composed = fact.compose.apply_plan(module, _cuda_inputs(0), _cuda_plan(tmp_path / "plan", cuda_kind_library),
                                       remainder="eager", speed_guard=False, replacement_guard=True,
                                       report_path=tmp_path / "report.json")
    report = composed.fact_report
    [entry] = report.composed
    assert entry.verified and not report.left_to_pytorch, str(report)
    assert 0 < entry.calls_ms < entry.subgraph_ms, str(report)
    assert entry.timing.startswith("CUDA graphs of 5 runs"), entry.timing
    written = json.loads((tmp_path / "report.json").read_text())["composed"][0]
    assert written["calls_ms"] == entry.calls_ms and written["subgraph_ms"] == entry.subgraph_ms
    _assert_same_on_cuda(composed, module)

    # replacement_guard None follows speed_guard=False: not timed, and the report says so
    untimed = fact.compose.apply_plan(module, _cuda_inputs(0), tmp_path / "plan", remainder="eager",
                                      speed_guard=False)
    assert untimed.fact_report.composed[0].calls_ms is None
    assert ("replacement_guard off: the replacements were not timed against the subgraphs they "
            "replace") in untimed.fact_report.notes


@pytest.mark.gpu
@needs_cuda
def test_on_the_gpu_a_replacement_timed_slower_is_left(tmp_path, cuda_kind_library):
    module = Axpby()
    outputs = []
    composed = fact.compose.apply_plan(module, _cuda_inputs(0), _cuda_plan(tmp_path / "plan", cuda_kind_library),
                                       remainder="eager", speed_guard=False,
                                       replacement_guard=_timer(0.5, 0.25, outputs=outputs))
    report = composed.fact_report
    assert [(i.stage, i.reason) for i in report.left_to_pytorch] == \
        [("speed", SLOWER_REASON + "0.5 ms vs 0.25 ms")], str(report)
    assert composed.graph_module is None and not report.composed
    written, subgraph_outputs = outputs  # the kernel ran on the GPU, on the subgraph's inputs
    assert written["add"].is_cuda
    torch.testing.assert_close(written["add"], subgraph_outputs[0], rtol=1e-6, atol=1e-5)
    _assert_same_on_cuda(composed, module)


class BF16Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(512, 2048)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x), approximate="tanh")


@pytest.mark.gpu
@needs_cuda
@needs_engine_plan
def test_on_the_gpu_every_verified_replacement_of_a_real_model_is_timed(tmp_path):
    """An engine-planned bf16 Linear + GELU: whether its kernel beats cuBLAS + the GELU kernel
    is what the check measures, so either outcome is allowed; each verified replacement must
    have been timed, with positive times, and be kept or left accordingly."""
    torch.manual_seed(0)
    module = BF16Mlp().to("cuda", torch.bfloat16).eval()
    x = torch.randn(8, 256, 512, device="cuda", dtype=torch.bfloat16)
    composed = fact.optimize(module, (x,), "native", remainder="eager", work_dir=tmp_path,
                             speed_guard=False, replacement_guard=True)
    report = composed.fact_report
    timed_out = [i for i in report.left_to_pytorch if i.stage == "speed"]
    assert report.composed or timed_out, str(report)
    for entry in report.composed:
        assert entry.verified and entry.implementation == "kernels", str(report)
        assert entry.calls_ms > 0 and entry.subgraph_ms > 0, str(report)
        assert entry.calls_ms <= fact.compose.SLOWER_BY * entry.subgraph_ms, str(report)
    for item in timed_out:
        assert item.reason.startswith(SLOWER_REASON), str(report)
        calls_ms, subgraph_ms = (float(part.split()[0]) for part in
                                 item.reason[len(SLOWER_REASON):].split(" vs "))
        assert calls_ms > subgraph_ms > 0, str(report)
    with torch.no_grad():
        got, want = composed(x), module(x)
    assert ((got.double() - want.double()).norm() / want.double().norm()).item() < 2e-2
