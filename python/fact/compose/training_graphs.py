"""CUDA graphs for a module composed for training (docs/compose.md, "Training"): its forward and
backward graphs, each replayed through PyTorch's CUDA graph trees
(torch._inductor.cudagraph_trees: what torch.compile's "reduce-overhead" mode and the
"cudagraphs" backend use for AOTAutograd's graphs), so a training step bound by the host's
launches runs its forward and backward as two graph replays.

    TrainingGraphs(user_inputs)          one per fact.optimize call, handed to GraphCompilers
    .inspect(which, aot_graph, inputs)   read AOTAutograd's graph before it is composed
    .wrap(info, run, composed) -> run    graphed or not
    .describe()                          the report's cuda_graphs line

What the trees give: the forward's saved tensors and outputs live in the trees' memory pool and
are not copied (no second set of activations); parameters (the forward's leading inputs, lifted
by AOTAutograd) are static inputs read in place, so the optimizer's in-place steps are seen by
the next replay; a later replay of the forward that would overwrite an output still alive makes
the trees record a new graph while a backward is pending, and otherwise give the output up:
reading an output a newer replay overwrote raises an error (as under torch.compile's
"reduce-overhead", each call of the composed module a new invocation: clone an output to keep
it past the next step).
Before a graph is recorded, the composed graph's Inductor remainder is compiled again by
compile_fx, without dynamo's guards (remainder_without_guards: a guard failing inside the
recording would recompile, and Inductor's autotuning synchronizes, which a capture forbids).
A graph is not used where a replay would skip work the composed module's Python does on each
call (a derived operand recomputed when a parameter changed, state synced from the original's
attributes), nor where the trees' own checks refuse it (inputs mutated, CPU tensors, an op a
graph cannot hold): then that graph runs as composed, with the reason in the report.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch

from fact.compose.signature import _root_reason


class TrainingGraphs:
    """The CUDA graph decision and wrapping for the two graphs of one composed training module.
    `user_inputs`: how many inputs the module's forward takes (the forward graph's inputs beyond
    those are the parameters and buffers AOTAutograd lifted in front of them)."""

    def __init__(self, user_inputs: int):
        self.user_inputs = user_inputs
        self.graphed: dict[str, bool] = {}
        self.reasons: dict[str, str] = {}
        self.notes: list[str] = []
        self.device_index: int | None = None

    def inspect(self, which: str, aot_graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> dict:
        """What wrap needs from AOTAutograd's graph, read before FACT composes it (composing
        rewrites the graph): its static inputs, the trees' own refusal, placeholders, output
        stack traces, mutated inputs and device."""
        from torch._dynamo.backends import cudagraphs as backend

        if which == "forward":
            fixed = max(0, len(inputs) - self.user_inputs)
        else:
            fixed = backend.count_tangents(aot_graph)
        info = {"which": which, "fixed": fixed, "inputs": list(inputs),
                "reason": _device_reason(inputs)}
        if info["reason"] is None:
            info["reason"] = backend.check_for_skip(aot_graph, fixed)
        if info["reason"] is None:
            info.update(device_index=backend.get_device_index(aot_graph),
                        stack_traces=backend.get_stack_traces(aot_graph),
                        placeholders=backend.get_placeholder_info(aot_graph.graph),
                        mutated=backend.find_input_mutations(aot_graph.graph))
        return info

    def wrap(self, info: dict, run: Callable, composed: Any) -> Callable:
        """`run` (the composed graph in the boxed calling convention) replayed as a CUDA graph
        tree when it can be, else `run` as it is (the reason kept for describe())."""
        which = info["which"]
        reason = info["reason"] or _python_reason(composed)
        if which == "backward" and reason is None and not self.graphed.get("forward", False):
            reason = "the forward graph is not a CUDA graph"
        if reason is not None:
            self.graphed[which] = False
            self.reasons[which] = reason
            if which == "backward" and self.graphed.get("forward", False):
                return _running_backward(run, self.device_index)
            return run
        from torch._inductor.cudagraph_trees import cudagraphify_impl

        why_eager = remainder_without_guards(composed, info["inputs"])
        if why_eager:
            self.notes.append(f"{which}: {why_eager}")
        if self.device_index is None:
            self.device_index = info["device_index"]
        graphed = cudagraphify_impl(
            run, info["inputs"], range(info["fixed"]), device_index=info["device_index"],
            is_backward=which == "backward", is_inference=False,
            stack_traces=info["stack_traces"], placeholders=info["placeholders"],
            mutated_input_idxs=info["mutated"])
        graphed._boxed_call = True
        self.graphed[which] = True
        return _a_new_invocation_per_call(graphed) if which == "forward" else graphed

    def describe(self) -> str:
        """The report's `cuda_graphs` line."""
        on = [which for which, graphed in self.graphed.items() if graphed]
        off = [f"{which}: {self.reasons[which]}" for which, graphed in self.graphed.items()
               if not graphed]
        if not on:
            return "off (" + ("; ".join(off) or "no graph compiled") + ")"
        text = (f"on (CUDA graph trees: the {' and '.join(on)} graph"
                f"{'s' if len(on) > 1 else ''} replayed; an output kept past the next step must "
                f"be cloned")
        text += f"; not graphed: {'; '.join(off)}" if off else ""
        return text + (f"; {'; '.join(self.notes)})" if self.notes else ")")


def remainder_without_guards(composed: Any, inputs: Sequence[Any]) -> str:
    """A graphed composed graph's Inductor remainder compiled once, now, by Inductor's
    compile_fx on the graph itself: no dynamo frame, so no guard is checked when it runs.

    The remainder torch.compile'd by apply_plan is a dynamo frame whose guards were made on the
    planning inputs (plain tensors, no torch-function mode); run inside AOTAutograd's compiled
    function on the module's Parameters, the guards fail and dynamo compiles it again, and a
    recompile inside a CUDA graph recording runs Inductor's autotuning, which synchronizes and
    so breaks the capture (a Llama block's forward). compile_fx autotunes here, outside any
    recording, and its code runs as it is on every call. It compiles with autocast off (the
    graph already holds autocast's casts) and runs with autocast off for the same reason.

    Returns "" when the remainder was replaced (or there is none: an eager remainder), else
    why the torch.compile'd remainder stays."""
    graph_module = getattr(composed, "graph_module", None)
    if getattr(composed, "_compiled", None) is None or graph_module is None:
        return ""
    from torch._inductor.compile_fx import compile_fx

    # compile_fx rewrites the calling convention of a graph with pytree code generation in
    # place: it gets a module of its own over a copy of the graph (the attributes shared).
    own = torch.fx.GraphModule(graph_module, copy.deepcopy(graph_module.graph))
    try:
        with _autocast_off(), torch.no_grad():
            compiled = compile_fx(own, list(inputs))
    except Exception as error:  # noqa: BLE001 - the torch.compile'd remainder stays
        return f"the remainder stays torch.compile'd (compile_fx failed: {_root_reason(error)})"
    boxed = getattr(compiled, "_boxed_call", False)

    def run(*args: Any) -> Any:
        with _autocast_off():
            return compiled(list(args)) if boxed else compiled(*args)

    composed.__dict__["_compiled"] = run
    return ""


def _autocast_off() -> Any:
    return torch.autocast("cuda", enabled=False) if torch.cuda.is_available() \
        else torch.autocast("cpu", enabled=False)


def _a_new_invocation_per_call(graphed: Callable) -> Callable:
    """The graphed forward, each call counted as a new invocation by the trees, as each call of a
    torch.compile'd function is (the generation the trees read from torch._dynamo): once no
    backward is pending, a call starts a new generation, so the previous step's outputs are
    given up (reading one that a replay overwrote raises) instead of kept alive by recording
    one more graph per step."""
    from torch._dynamo.mutation_guard import GenerationTracker

    def forward(args: list) -> Any:
        GenerationTracker.generation += 1
        return graphed(args)

    forward._boxed_call = True
    return forward


def _device_reason(inputs: Sequence[Any]) -> str | None:
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if not tensors or any(x.device.type != "cuda" for x in tensors):
        return "CUDA graphs need CUDA inputs"
    return None


def _python_reason(composed: Any) -> str | None:
    """Work the composed module's Python does on each call that a replay would skip."""
    if getattr(composed, "_derived", None):
        return ("its derived operands are recomputed by the composed module's Python when a "
                "parameter changes, which a replay skips")
    if getattr(composed, "_state", None):
        return ("it syncs the original module's buffers or attributes in Python on each call, "
                "which a replay skips")
    return None


def _running_backward(run: Callable, device_index: int | None) -> Callable:
    """A backward left out of the graphs after a graphed forward: tells the trees' manager that
    the backward runs (so the forward's outputs it reads stay valid), then runs it."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device_index or 0, create_if_none_exists=False)

    def backward(args: list) -> Any:
        if manager is not None:
            manager.set_to_running_backward()
        return run(args)

    backward._boxed_call = True
    return backward
