"""Never slower, per replacement (docs/architecture.md; docs/compose.md "Never slower than doing
nothing"): one composed replacement's `fact::launch` calls timed against the subgraph it
replaces, run by PyTorch eagerly in the model's dtype, on the same inputs.

    time_replacement(lifted, graph_module, values, calls, device, seed, examples, derived=None,
                     timer=None) -> ReplacementTiming(calls_ms, subgraph_ms, method)

The inputs are the ones the float64 check builds (fact.verify.replacement_inputs and
call_environment with the same seed): real parameters, buffers and constants, fresh random
floating activations, example values for the rest, derived operands computed from them. The
calls write into results allocated once (`fact::launch_out`), later calls reading earlier
calls' results; the subgraph is the lifted GraphModule (fact.verify.lift) called as it is.

Without `timer` (a CUDA device): each side runs RUNS_PER_GRAPH times inside one captured CUDA
graph, so neither pays Python or launch overhead per kernel, and the graph's replays are timed
(fact.timing.cuda_median_ms: warm-up, median of CUDA events) and divided by RUNS_PER_GRAPH.
Where either side cannot be captured, both are timed as plain runs the same way instead (the
method says why). With `timer` (fn -> milliseconds, any device: tests inject one), it times
the calls first (fn returns value id -> tensor, the calls' results included), then the
subgraph (fn returns the lifted module's outputs). Deciding what is slower is the caller's
(ReplacementTiming.slower_than_subgraph); fact.compose.apply_plan leaves such replacements to
PyTorch with stage "speed".

With `compile_subgraph=True` the subgraph side is the lifted module compiled by Inductor
(`inductor_subgraph`: torch.compile, full graph, static shapes, compiled before timing): what
runs in its place when the module's remainder is compiled by Inductor. Eager's subgraph is the
fair baseline for an eager remainder; under an Inductor remainder, Inductor's version of the
subgraph is what a declined replacement hands back to, and it can be slower than eager's (it
adds layout copies in front of cuDNN's attention, for one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from fact import ops
from fact import verify as checks
from fact.timing import Timer, capture_cuda_graph, cuda_median_ms

RUNS_PER_GRAPH = 5   # runs of one side per captured CUDA graph: a replay's own overhead is shared by them


@dataclass
class ReplacementTiming:
    calls_ms: float      # the replacement's fact::launch calls, one run
    subgraph_ms: float   # the subgraph it replaces, run eagerly by PyTorch, one run
    method: str          # how both were timed, for the report

    def slower_than_subgraph(self, by: float) -> bool:
        """Whether the calls take longer than `by` × the subgraph's time."""
        return self.calls_ms > by * self.subgraph_ms


def time_replacement(lifted: checks.Lifted, graph_module: torch.fx.GraphModule, values: dict,
                     calls: Sequence[checks.CallToCheck], device: torch.device, seed: int,
                     examples: dict, derived: Optional[dict] = None,
                     timer: Optional[Timer] = None,
                     compile_subgraph: bool = False) -> ReplacementTiming:
    """The replacement's calls and its lifted subgraph timed on the same inputs (module
    docstring). Arguments as fact.verify.check takes them; `timer` None needs a CUDA `device`;
    `compile_subgraph`: time Inductor's compilation of the subgraph instead of eager's run.
    Raises fact.verify.InputError when the inputs cannot be built, and whatever running,
    compiling or timing raises (a failing call, out of memory): the caller decides what that
    means."""
    given = checks.replacement_inputs(lifted, graph_module, values, calls, device, seed, examples)
    given = {node: _on_device(value, device) for node, value in given.items()}
    environment = checks.call_environment(values, given, derived)
    run_calls = _calls_runner(calls, environment, device)
    subgraph_inputs = [given[node] for node in lifted.inputs]

    with torch.no_grad():
        subgraph = inductor_subgraph(lifted.module, subgraph_inputs) if compile_subgraph \
            else lifted.module

        def run_subgraph():
            return subgraph(*subgraph_inputs)

        if timer is not None:
            return ReplacementTiming(float(timer(run_calls)), float(timer(run_subgraph)),
                                     "the given timer")
        if device.type != "cuda":
            raise ValueError(f"timing a replacement without a timer needs a CUDA device, not {device}")
        with torch.cuda.device(device):
            return _timed_on_cuda(run_calls, run_subgraph)


def inductor_subgraph(module: torch.nn.Module, inputs: Sequence[Any]) -> Callable[..., Any]:
    """`module` compiled by torch.compile (Inductor, one graph, static shapes), already compiled
    for `inputs` (run once here, so that no timing pays for the compile)."""
    compiled = torch.compile(module, fullgraph=True, dynamic=False)
    compiled(*inputs)
    return compiled


def _on_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor) and value.device != device:
        return value.to(device)
    return value


def _calls_runner(calls: Sequence[checks.CallToCheck], environment: dict,
                  device: torch.device) -> Callable[[], dict]:
    """A function running the calls in order into results allocated here, once (a call reading
    an earlier call's result reads that call's result tensor); it returns value id -> tensor,
    the operands and the results."""
    environment = dict(environment)
    launches = []
    for call in calls:
        operands = [environment[vid] for vid in call.operands]
        results = [ops.allocate_result(ops.result_spec(result), device) for result in call.results]
        environment.update({result[0]: tensor for result, tensor in zip(call.results, results)})
        launches.append((operands, results, call.id))

    def run_calls() -> dict:
        for operands, results, number in launches:
            torch.ops.fact.launch_out.default(operands, results, number)
        return environment
    return run_calls


def _repeated(fn: Callable[[], Any], times: int) -> Callable[[], Any]:
    def run():
        for _ in range(times):
            output = fn()
        return output
    return run


def _timed_on_cuda(run_calls: Callable[[], Any], run_subgraph: Callable[[], Any]) -> ReplacementTiming:
    try:
        calls_graph, _ = capture_cuda_graph(_repeated(run_calls, RUNS_PER_GRAPH))
        subgraph_graph, _ = capture_cuda_graph(_repeated(run_subgraph, RUNS_PER_GRAPH))
    except Exception as error:  # noqa: BLE001 - not capturable: time plain runs instead
        torch.cuda.synchronize()
        return ReplacementTiming(cuda_median_ms(run_calls), cuda_median_ms(run_subgraph),
                                 f"CUDA events around plain runs (CUDA-graph capture failed: "
                                 f"{checks._first_line(error)})")
    try:
        calls_ms = cuda_median_ms(calls_graph.replay) / RUNS_PER_GRAPH
        subgraph_ms = cuda_median_ms(subgraph_graph.replay) / RUNS_PER_GRAPH
    finally:
        del calls_graph, subgraph_graph
    return ReplacementTiming(calls_ms, subgraph_ms,
                             f"CUDA graphs of {RUNS_PER_GRAPH} runs, median of CUDA-event-timed replays")
