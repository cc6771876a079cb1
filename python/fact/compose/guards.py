"""Running the composed module never slower than doing nothing: the Inductor-compiled
remainder, CUDA graphs, the whole-module check against torch.compile of the original and the
original eagerly, and each replacement timed against the subgraph it replaces."""
from __future__ import annotations

import copy
import warnings
from typing import Callable, Union

import torch
import torch.fx

from fact import verify as checks
from fact.compose.module import ComposedModule, _CudaGraphRunner
from fact.compose.signature import _first_line, _root_reason
from fact.replacement_speed import time_replacement
from fact.report import FactReport
from fact.timing import CandidatesTimer, Timer, l2_flushed_medians_ms

SLOWER_BY = 1.02   # the composed module falls back when it takes longer than this × the compiled original,
                   # and a replacement is left to PyTorch when its calls take longer than this × its subgraph


def _compiled_original(module: torch.nn.Module, example_inputs: tuple,
                       warm: list | None = None) -> tuple[Callable | None, str]:
    """(torch.compile of the module, run once on the example inputs, or None; why not).
    `warm` (a plan over declared ranges): inputs at every bucket tuple's edges; the module is
    compiled with symbolic shapes (dynamic=True) and run on each, so no size inside the ranges
    compiles later."""
    try:
        compiled = torch.compile(module, dynamic=warm is not None)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for inputs in [example_inputs, *(warm or [])]:
                compiled(*inputs)
    except Exception as error:  # noqa: BLE001 - never crash: eager instead
        return None, f"Inductor compilation failed: {_root_reason(error)}"
    return compiled, ""


def inside_dynamo_compilation() -> bool:
    """Whether this runs inside a TorchDynamo compilation: a torch.compile backend (backend
    "fact", training over declared ranges) composing a graph dynamo captured. A function
    torch.compile'd and called there runs eagerly, and dynamo marks its code to be skipped from
    then on: it would never compile, at any later call either."""
    return torch._guards.CompileContext.try_get() is not None


def _compile_remainder(composed: ComposedModule, example_inputs: tuple, warm: list | None = None) -> None:
    """torch.compile (Inductor, default mode) of the composed graph, run once on the example
    inputs; on failure the remainder stays eager with the reason in the report. `warm` (a plan
    over declared ranges): compiled with symbolic shapes and run at every bucket tuple's edges
    (sizes of 1 get dynamo's specialized graph then, not at run time). Inside a dynamo
    compilation (inside_dynamo_compilation) the same happens at the composed graph's first
    call, after that compilation (_RemainderCompiledAtFirstCall)."""
    if inside_dynamo_compilation():
        composed.__dict__["_compiled"] = _RemainderCompiledAtFirstCall(composed, example_inputs, warm)
        warmed = f"symbolic shapes, warmed at {len(warm)} bucket edge tuple(s); " if warm is not None else ""
        composed.fact_report.remainder = (f"inductor ({warmed}compiled at the first call: composed inside "
                                          f"a torch.compile backend)")
        return
    try:
        compiled = _compiled_and_warmed(composed.graph_module, example_inputs, warm)
    except Exception as error:  # noqa: BLE001 - never crash: eager instead
        composed.fact_report.remainder = f"eager (Inductor compilation failed: {_root_reason(error)})"
        return
    composed.__dict__["_compiled"] = compiled
    composed.fact_report.remainder = "inductor" + (f" (symbolic shapes, warmed at {len(warm)} bucket "
                                                   f"edge tuple(s))" if warm is not None else "")


def _compiled_and_warmed(graph_module: torch.fx.GraphModule, example_inputs: tuple,
                         warm: list | None) -> Callable:
    compiled = torch.compile(graph_module, dynamic=warm is not None)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for inputs in [example_inputs, *(warm or [])]:
            compiled(*inputs)
    return compiled


class _RemainderCompiledAtFirstCall:
    """The composed graph's remainder, torch.compile'd and warmed (as _compile_remainder does)
    at its first call outside the dynamo compilation that composed it (calls inside it run the
    graph eagerly), then that compiled function. It holds the planning inputs until then.
    A failure raises to ComposedModule._run_uncaptured, which runs the graph eagerly from then
    on and says why in the report."""

    def __init__(self, composed: ComposedModule, example_inputs: tuple, warm: list | None):
        self.composed, self.example_inputs, self.warm = composed, example_inputs, warm

    def __call__(self, *args):
        if inside_dynamo_compilation():   # a check of the composed graph while it is composed
            return self.composed.graph_module.forward(*args)
        composed, example_inputs, warm = self.composed, self.example_inputs, self.warm
        self.example_inputs = self.warm = None
        # A module of its own over a copy of the graph (the attributes shared): dynamo has
        # marked the composed graph's own forward code skipped by now (it ran while dynamo
        # compiled), so torch.compile of it would run it eagerly.
        graph_module = composed.graph_module
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # deprecations in copying the graph's pytree specs
            own = torch.fx.GraphModule(graph_module, copy.deepcopy(graph_module.graph))
        compiled = _compiled_and_warmed(own, example_inputs, warm)
        composed.__dict__["_compiled"] = compiled
        return compiled(*args)


def _capture_cuda_graph(composed: ComposedModule, example_inputs: tuple) -> None:
    fn = composed._compiled if composed._compiled is not None else composed.graph_module
    try:
        runner = _CudaGraphRunner(fn, example_inputs)
    except Exception as error:  # noqa: BLE001 - capture trouble: run without the graph
        composed.fact_report.cuda_graphs = f"off (capture failed: {_first_line(error)})"
        return
    composed.__dict__["_cuda_graph"] = runner
    composed.fact_report.cuda_graphs = "on"


def graphs_unsafe(exported: torch.export.ExportedProgram) -> str:
    """Why the composed forward must not run as a CUDA graph ("" when it may): a graph reads
    its inputs from static copies, so a forward that writes its inputs (a functionalized
    mutation, or an in-place op on an input or a view of one) would write the copies."""
    mutated = set(exported.graph_signature.user_inputs_to_mutate.values())
    user_inputs = set(exported.graph_signature.user_inputs)
    for node in exported.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.is_mutable:
            continue
        for argument, value in zip(schema.arguments, node.args):
            if argument.alias_info is not None and argument.alias_info.is_write:
                root = _aliased_root(value)
                if root is not None and root.name in user_inputs:
                    mutated.add(root.name)
    if mutated:
        return (f"the forward writes its input(s) {', '.join(sorted(mutated))}; a CUDA graph would "
                f"write copies")
    return ""


def _aliased_root(value) -> torch.fx.Node | None:
    """The placeholder `value` is a view of (through ops whose output aliases their first
    input), or None."""
    while isinstance(value, torch.fx.Node):
        if value.op == "placeholder":
            return value
        schema = getattr(value.target, "_schema", None)
        returns = schema.returns if schema is not None else []
        if value.op != "call_function" or not returns or returns[0].alias_info is None or not value.args:
            return None
        value = value.args[0]
    return None


def _shape_cuda_graphs(composed: ComposedModule) -> None:
    """CUDA graphs per size tuple for a plan over declared ranges (fact.compose.shape_graphs)."""
    from fact.compose.shape_graphs import ShapeGraphs
    report = composed.fact_report
    graphs = ShapeGraphs(lambda *args: composed._run_uncaptured(args),
                         on_change=lambda line: setattr(report, "cuda_graphs", line))
    composed.__dict__["_shape_graphs"] = graphs
    report.cuda_graphs = graphs.describe()


def _never_slower(composed: ComposedModule, module: torch.nn.Module, example_inputs: tuple,
                  timer: CandidatesTimer) -> None:
    """Times the composed forward against torch.compile of the original and the original run
    eagerly, on the example inputs, and makes the faster of those two run the planned signature
    when the composed one is slower than it by more than 2% (never slower than
    doing nothing; a small, launch-bound module often runs faster eagerly than compiled). The
    report's `runs` and `speed` say what was found."""
    report = composed.fact_report
    original, why_not = _compiled_original(module, example_inputs)
    # Never `original or module`: torch.compile's OptimizedModule forwards len() (so truth
    # testing) to the module, which raises TypeError for one without __len__.
    baseline = original if original is not None else module
    name = "torch.compile of the original" if original is not None else \
        f"the original eagerly ({why_not})"
    # The composed module timed as a user calls it (its fallback is not set yet): the signature
    # guard, the state and derived-operand checks, then the composed forward, whose host work
    # counts wherever the host's launches bound the call.
    candidates = {"composed": lambda: composed(*example_inputs),
                  "original": lambda: baseline(*example_inputs)}
    if original is not None:
        candidates["eager"] = lambda: module(*example_inputs)
    try:
        times = timer(candidates)
        composed_ms, original_ms = times["composed"], times["original"]
        eager_ms = times.get("eager")
    except Exception as error:  # noqa: BLE001 - timing trouble: keep what was composed
        _guard_not_done(report, error, "the composed module runs without it")
        return
    report.speed = {"composed_ms": composed_ms, "original_ms": original_ms, "original": name,
                    "threshold": SLOWER_BY}
    fastest, fastest_ms, fastest_name = baseline, original_ms, name
    if eager_ms is not None:
        report.speed["eager_ms"] = eager_ms
        if original_ms > SLOWER_BY * eager_ms:
            fastest, fastest_ms, fastest_name = module, eager_ms, "the original eagerly"
    if composed_ms > SLOWER_BY * fastest_ms:
        composed.__dict__["_fallback"] = fastest
        report.runs = (f"{fastest_name}: the composed module took {composed_ms:.4g} ms, "
                       f"{fastest_name} {fastest_ms:.4g} ms (more than {SLOWER_BY - 1:.0%} faster)")
    else:
        report.runs = (f"composed ({composed_ms:.4g} ms; {name} {original_ms:.4g} ms"
                       + (f"; eagerly {eager_ms:.4g} ms" if eager_ms is not None else "") + ")")


def _guard_not_done(report: FactReport, error: Exception, what_runs: str) -> None:
    """The never-slower check could not time the candidates: a note in the report and a warning,
    so a broken check is not silent (on 2026-11-26 it raised on every GPU case and a composed
    module 3% slower than torch.compile stayed in place)."""
    note = f"never-slower check not done: {_first_line(error)}"
    report.notes.append(note)
    warnings.warn(f"fact: {note}; {what_runs}", RuntimeWarning, stacklevel=3)


def _faster_of_compiled_and_eager(module: torch.nn.Module, compiled: Callable, example_inputs: tuple,
                                  timer: CandidatesTimer, report: FactReport) -> Callable:
    """Nothing composed: torch.compile of the original, unless the original runs faster eagerly
    by more than 2% (then the original itself: never slower). The report says which."""
    try:
        times = timer({"compiled": lambda: compiled(*example_inputs),
                       "eager": lambda: module(*example_inputs)})
        compiled_ms, eager_ms = times["compiled"], times["eager"]
    except Exception as error:  # noqa: BLE001 - timing trouble: torch.compile as by default
        _guard_not_done(report, error, "torch.compile of the original runs")
        return compiled
    report.speed = {"original_ms": compiled_ms, "original": "torch.compile of the original",
                    "eager_ms": eager_ms, "threshold": SLOWER_BY}
    if compiled_ms > SLOWER_BY * eager_ms:
        report.runs = (f"the original eagerly (nothing composed; {eager_ms:.4g} ms, torch.compile "
                       f"of it {compiled_ms:.4g} ms)")
        return module
    return compiled


def _module_timer(speed_guard: Union[bool, Timer], on_gpu: bool) -> CandidatesTimer | None:
    """The whole-module never-slower check's timer: for True on CUDA l2_flushed_medians_ms (the
    candidates interleaved round by round, so clock drift falls on each alike); a callable
    speed_guard (any device) times them one after the other; else None (no check)."""
    if callable(speed_guard):
        return lambda candidates: {name: float(speed_guard(fn)) for name, fn in candidates.items()}
    return l2_flushed_medians_ms if speed_guard and on_gpu else None


def _replacement_timer(replacement_guard: Union[bool, Timer, None], speed_guard: Union[bool, Timer],
                       on_gpu: bool) -> tuple[bool, Timer | None]:
    """(whether each replacement is timed against its subgraph, the timer: None for
    fact.replacement_speed's CUDA-graph timing). None follows bool(speed_guard); True times on
    CUDA only; a callable is the timer, on any device."""
    guard = bool(speed_guard) if replacement_guard is None else replacement_guard
    if callable(guard):
        return True, guard
    return bool(guard) and on_gpu, None


def _host_kernel_timer(replacement_guard: Union[bool, Timer, None], speed_guard: Union[bool, Timer],
                       on_gpu: bool) -> Timer | None:
    """On the CPU path, the timer for replacements that run host kernel libraries (registry
    kernels): the guard on (True, or None following speed_guard) times them against their
    subgraphs with perf_counter, so none slower than PyTorch is composed; None otherwise (the
    host reference is a stand-in for GPU kernels and is not timed)."""
    guard = bool(speed_guard) if replacement_guard is None else replacement_guard
    if on_gpu or not guard or callable(guard):
        return None
    from fact import timing
    return lambda fn: timing.time_cpu(fn, 2, 20).median_ms


def registry_speed_refusal(replacement: dict) -> str | None:
    """Why a replacement realized by a registry kernel may not be composed for its recorded
    speed (the plan's registry_speed: the latest timing record of the entry, slower than the
    PyTorch baseline it was measured against, and no speed_override), or None."""
    speed = replacement.get("registry_speed")
    if not isinstance(speed, dict) or speed.get("speed_override"):
        return None
    measured = speed.get("measured") if isinstance(speed.get("measured"), dict) else {}
    speedup = measured.get("speedup")
    if not isinstance(speedup, (int, float)):
        return "its registry kernel has no timing record against PyTorch"
    if speedup >= 1.0:
        return None
    base = (measured.get("baseline") or {}).get("ms")
    return (f"its registry kernel was measured slower than PyTorch on {measured.get('device', '?')}: "
            f"{measured.get('ms')} ms vs {base} ms ({speedup:.3g}x)")


def _faster_than_their_subgraphs(accepted: list, graph_module: torch.fx.GraphModule, examples: dict,
                                 device: torch.device, timer: Timer | None, report: FactReport,
                                 inductor_remainder: bool = False) -> list:
    """Never slower, per replacement: times each accepted (planned, entry)'s calls against
    the subgraph it replaces (fact.replacement_speed, on the inputs of its float64 check) and
    returns those not slower by more than SLOWER_BY; the others are left to PyTorch (stage
    "speed"). Both times go into the entry. A replacement that cannot be timed is kept, with a
    note.

    `inductor_remainder`: the remainder is compiled by Inductor, so a declined replacement's
    subgraph would run as Inductor compiles it, not eagerly. A replacement slower than eager's
    subgraph is then timed again against the subgraph compiled by Inductor, and kept when it is
    not slower than that (entry.compiled_subgraph_ms; the report says which baseline decided).
    The whole-module check (composed against torch.compile of the original) still follows."""
    kept = []
    for planned, entry in accepted:
        rid = planned.doc.get("id")
        calls = [checks.CallToCheck(c.id, c.label, c.operands, c.results) for c in planned.calls]

        def timed(compile_subgraph: bool = False):
            return time_replacement(planned.lifted, graph_module, planned.values, calls, device,
                                    seed=planned.seed, examples=examples, derived=planned.derived,
                                    timer=timer, compile_subgraph=compile_subgraph)
        try:
            timing = timed()
        except Exception as error:  # noqa: BLE001 - timing trouble never costs a verified replacement
            report.notes.append(f"{planned.what}: kept without timing it against the subgraph it "
                                f"replaces ({_first_line(error)})")
            kept.append((planned, entry))
            continue
        entry.calls_ms, entry.subgraph_ms, entry.timing = timing.calls_ms, timing.subgraph_ms, timing.method
        if not timing.slower_than_subgraph(SLOWER_BY):
            kept.append((planned, entry))
            continue
        reason = (f"slower than PyTorch's own run of the subgraph: "
                  f"{timing.calls_ms:.4g} ms vs {timing.subgraph_ms:.4g} ms")
        if inductor_remainder:
            try:
                compiled = timed(compile_subgraph=True)
            except Exception as error:  # noqa: BLE001 - no compiled baseline: eager's decides
                report.notes.append(f"{planned.what}: not timed against Inductor's compilation of "
                                    f"its subgraph ({_first_line(error)})")
            else:
                entry.compiled_subgraph_ms = compiled.subgraph_ms
                if not compiled.slower_than_subgraph(SLOWER_BY):
                    entry.calls_ms = compiled.calls_ms
                    entry.timing = (f"{compiled.method}; slower than eager's subgraph "
                                    f"({timing.calls_ms:.4g} vs {timing.subgraph_ms:.4g} ms), not "
                                    f"than Inductor's ({compiled.calls_ms:.4g} vs "
                                    f"{compiled.subgraph_ms:.4g} ms), which the Inductor "
                                    f"remainder would run instead")
                    kept.append((planned, entry))
                    continue
                reason += (f", and than Inductor's compilation of it: {compiled.calls_ms:.4g} ms "
                           f"vs {compiled.subgraph_ms:.4g} ms")
        report.leave(planned.what, reason, rid, "speed", subgraph_ms=timing.subgraph_ms)
    return kept
