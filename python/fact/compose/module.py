"""The optimized module (`ComposedModule`) and what it runs: the composed graph, its
Inductor-compiled remainder, a CUDA graph of it, or the original; and `ReplacedSubgraph`, a
composed replacement as a benchmark times it alone."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx

from fact.compose.signature import _describe, _root_reason, _signature
from fact.report import FactReport
from fact.timing import capture_cuda_graph


class _CudaGraphRunner:
    """`fn` captured into a torch.cuda.CUDAGraph for one input signature: each call copies its
    tensors into the static input buffers, replays, and returns copies of the static outputs
    (so a later call never overwrites a result the caller kept)."""

    def __init__(self, fn: Callable, example_args: Sequence[Any], warmup_calls: int = 3,
                 pool: Any = None):
        self.static_args = [_static_like(a) for a in example_args]
        self.graph, self.static_output = capture_cuda_graph(lambda: fn(*self.static_args),
                                                            warmup_calls, pool)

    def __call__(self, args: Sequence[Any]):
        for static, arg in zip(self.static_args, args):
            if isinstance(static, torch.Tensor):
                static.copy_(arg)
        self.graph.replay()
        return torch.utils._pytree.tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) else t, self.static_output)


def _static_like(arg: Any) -> Any:
    if not isinstance(arg, torch.Tensor):
        return arg
    static = torch.empty_strided(arg.shape, arg.stride(), dtype=arg.dtype, device=arg.device)
    static.copy_(arg)
    return static


@dataclass
class ReplacedSubgraph:
    """A composed replacement as a benchmark times it alone: the subgraph it replaced, lifted
    out of the exported graph (fact.verify.lift), and its fact::launch calls."""
    label: str
    rule: str
    summary: str                  # the calls' summaries, "; "-joined
    kernels: list                 # the calls' kernel names ("" where none)
    module: torch.fx.GraphModule  # the lifted subgraph (returns a tuple of the outputs)
    inputs: list                  # its inputs: (node name, op, target) in the exported graph
    values: dict                  # call operand value id -> (node name, op, target)
    calls: list                   # (call number, operand value ids, result value ids)
    outputs: list                 # output value ids, in the module's output order
    derived: dict = field(default_factory=dict)  # derived operand value id -> its tensor


class ComposedModule(torch.nn.Module):
    """The optimized module. `graph_module` is the rewritten exported graph (None when nothing
    was composed), `original` the module it came from, `fact_report` what was done and why.
    For the planned signature it runs, in this order of preference: the fallback the report's
    `runs` names when one was chosen (torch.compile of the original: nothing composed, or the
    composed graph was slower), the CUDA graph (of the size tuple, for a plan over declared
    ranges), the Inductor-compiled remainder, the graph eagerly. Other signatures run the original module."""

    def __init__(self, original: torch.nn.Module, graph_module: torch.fx.GraphModule | None,
                 signature: tuple | None, report: FactReport, *, range_guard: Any = None,
                 strict: bool = False):
        super().__init__()
        self.original = original
        self.graph_module = graph_module
        self.planned_signature = signature
        # Positions of inputs whose device the signature leaves out (fact.compose.signature):
        # set by allow_any_device.
        self.device_free_inputs: frozenset = frozenset()
        self.fact_report = report
        # A plan over declared ranges: fact.compose.range_guard.RangeGuard decides which calls
        # run the composed graph (instead of the planned signature).
        self.range_guard = range_guard
        # strict: a call outside the plan raises ValueError instead of running the original.
        self.strict = strict
        self._warned: set = set()
        # Per bucket tuple (row of the bucket table) of a dynamic plan: what runs it when the
        # composed graph is not the fastest there (fact.compose.bucket_speed).
        self.__dict__["_bucket_table"] = None
        self.__dict__["_bucket_fallbacks"] = {}
        # Not submodules (their parameters are the original's): kept out of state_dict.
        self.__dict__["_compiled"] = None
        self.__dict__["_cuda_graph"] = None
        # CUDA graphs captured on the calls (fact.compose.shape_graphs.ShapeGraphs): per size
        # tuple of a plan over declared ranges, or the planned signature's (key ()).
        self.__dict__["_shape_graphs"] = None
        self.__dict__["_fallback"] = None
        self.__dict__["replacements"] = []  # ReplacedSubgraph per composed replacement
        # Derived operands (packed / folded weights) as buffers of graph_module: computed again
        # before a call when a parameter they come from changed.
        self.__dict__["_derived"] = []
        # Buffers and plain tensor attributes of the original that the composed graph holds
        # (fact.module_state.StateBinding: synced before and after each call), and tensors in
        # container attributes it holds as constants (fact.module_state.HeldConstant).
        self.__dict__["_state"] = []

    def _run_composed(self, args: tuple, sizes: tuple | None = None):
        """The composed forward: its CUDA graph when there is one (per size tuple `sizes` of a
        plan over declared ranges), else _run_uncaptured."""
        if self._cuda_graph is not None:
            return self._cuda_graph(args)
        if self._shape_graphs is not None:
            # the planned signature is the one size tuple () of a static plan
            return self._shape_graphs(sizes if sizes is not None else (), args)
        return self._run_uncaptured(args)

    def _run_uncaptured(self, args: tuple):
        """The composed forward without a CUDA graph: the Inductor-compiled remainder, else the
        graph eagerly."""
        if self._compiled is not None:
            try:
                return self._compiled(*args)
            except Exception as error:  # noqa: BLE001 - Inductor trouble: eager from now on
                self.__dict__["_compiled"] = None
                self.fact_report.remainder = f"eager (Inductor failed at a call: {_root_reason(error)})"
                warnings.warn(f"fact: the Inductor-compiled remainder failed "
                              f"({_root_reason(error)}); running it eagerly from now on",
                              stacklevel=3)
        # forward, not __call__: the exported module's pre-hooks re-check what the signature
        # guard has already checked (pytree spec, input constraints) on every call.
        return self.graph_module.forward(*args)

    def _run_planned(self, args: tuple, sizes: tuple | None = None):
        if self._fallback is not None:
            return self._fallback(*args)
        if sizes is not None and self._bucket_fallbacks:
            faster = self._bucket_fallbacks.get(self._bucket_table.index(sizes))
            if faster is not None:
                return faster(*args)
        if self.graph_module is None:
            return self.original(*args)
        changed = next((binding for binding in self._state if not binding.fits()), None)
        if changed is not None:
            self._warn_once(("state", changed.qualified), self._state_changed(changed))
            return self.original(*args)
        for binding in self._state:  # first: a derived operand may come from a bound tensor
            binding.before_call()
        for buffer in self._derived:
            buffer.refresh()
        out = self._run_composed(args, sizes)
        for binding in self._state:
            binding.after_call()
        return out

    @staticmethod
    def _state_changed(binding: Any) -> str:
        if binding.kind == "held constant":
            return (f"a tensor held in the attribute '{binding.qualified}' was replaced or changed "
                    f"since composing (the composed graph holds its value as a constant); running "
                    f"the original module")
        return (f"the tensor '{binding.qualified}' ({binding.kind}) no longer has the planned shape, "
                f"dtype or device; running the original module")

    def _warn_once(self, key: tuple, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"fact: {message}", stacklevel=4)

    def allow_any_device(self, positions: frozenset, example_inputs: tuple) -> None:
        """Lets the inputs at `positions` arrive on any device: 0-dim tensors that only PyTorch's
        own ops in the graph read (a fused attention's random-number seed and offset, which
        PyTorch keeps on the CPU, or on the GPU while a CUDA graph is captured, whatever
        device the traced graph gave them). `example_inputs`: the inputs the plan was made for."""
        if self.range_guard is not None and positions:
            self.range_guard.device_free = frozenset(positions)
            return
        if self.planned_signature is None or not positions:
            return
        self.device_free_inputs = frozenset(positions)
        self.planned_signature = _signature(example_inputs, self.device_free_inputs)

    def _has_plan(self) -> bool:
        """Whether something was composed (else there is no plan to be outside of, and the
        original serves any input)."""
        return self.graph_module is not None

    def _outside_plan(self, signature: tuple, why: str, args: tuple, kwargs: dict):
        """A call the plan does not cover: ValueError when strict, else the original module
        (one warning per signature)."""
        if self.strict and self._has_plan():
            raise ValueError(f"fact: inputs {_describe(signature)} are outside the plan: {why}")
        if self._has_plan() and signature not in self._warned:
            self._warned.add(signature)
            warnings.warn(f"fact: inputs {_describe(signature)} are outside the plan ({why}); "
                          f"running the original module for them", stacklevel=3)
        return self.original(*args, **kwargs)

    def forward(self, *args, **kwargs):
        if self.planned_signature is None and self.range_guard is None:
            return self.original(*args, **kwargs)
        if self.range_guard is not None:
            sizes, why = self.range_guard.check(args) if not kwargs else (None, "keyword arguments")
            if sizes is None:
                return self._outside_plan(_signature(args), why, args, kwargs)
            return self._run_planned(args, sizes)
        signature = _signature(args, self.device_free_inputs)
        if kwargs or signature != self.planned_signature:
            why = "keyword arguments" if kwargs else f"planned for {_describe(self.planned_signature)}"
            return self._outside_plan(signature, why, args, kwargs)
        return self._run_planned(args)
