"""`fact.optimize` of a module that trains (fact.compose.training.needs_gradients): the module
through AOTAutograd, its forward and backward graphs composed, and `TrainingComposedModule`,
which runs them for the traced signature and the original module for anything else."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from fact.compose.module import ComposedModule
from fact.compose.signature import _describe, _first_line, _signature
from fact.compose.training import (GraphCompilers, aot_compile, refuse_double_backward,
                                   training_report)
from fact.compose.training_forms import trace_training_forms
from fact.compose.training_graphs import TrainingGraphs
from fact.compose.training_memory import activation_memory_refusal
from fact.report import FactReport


class _FlatOutputs(torch.nn.Module):
    """The module with its outputs flattened to a tuple (AOTAutograd's contract); `spec` is
    their structure, recorded when traced. Its parameters are the module's own."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module
        self.spec = None

    def forward(self, *args: Any) -> tuple:
        flat, self.spec = pytree.tree_flatten(self.module(*args))
        return tuple(flat)


def autograd_state(module: torch.nn.Module, args: tuple) -> tuple:
    """What the traced graphs assume beyond the signature: which inputs require grad, each
    parameter (the same object) and whether it requires grad, each submodule's training flag,
    and the autocast state of the inputs' device types (AOTAutograd traces under the autocast
    active when composing and writes its casts into the graphs: a module composed under
    `torch.autocast` runs its bf16 GEMMs whether or not the call is under it)."""
    device_types = sorted({a.device.type for a in args if isinstance(a, torch.Tensor)})
    return (tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args),
            tuple((name, id(p), p.requires_grad) for name, p in module.named_parameters()),
            tuple(m.training for m in module.modules()),
            tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in device_types))


class TrainingComposedModule(ComposedModule):
    """A composed module that trains. For inputs with the traced signature, and while
    `autograd_state` is as traced, it runs AOTAutograd's function, whose forward and backward
    are the composed graphs (`graphs["forward"]`, `graphs["backward"]`: ComposedModules of
    the inference path); the parameters are the original module's, so an optimizer built on
    `original.parameters()` trains what it runs. Anything else (other shapes, eval mode, a
    parameter frozen or replaced since, autocast switched on or off) runs the original module,
    with one warning per reason (strict: ValueError for another signature). Where the never-slower
    check handed the traced signature to a faster baseline, its calls run that baseline whatever
    the module's state (torch.compile of the original guards on that state itself)."""

    def __init__(self, original: torch.nn.Module, trainable: Callable, spec: Any, signature: tuple,
                 state: tuple, report: FactReport, graphs: dict, *, strict: bool = False):
        super().__init__(original, None, signature, report, strict=strict)
        self.__dict__["_trainable"] = trainable
        self.__dict__["graphs"] = graphs
        self._spec = spec
        self._traced_state = state
        self.__dict__["_step_fallback"] = None   # never_slower_in_training's choice, if slower

    def set_speed_fallback(self, fallback: Callable) -> None:
        """What runs the calls of the traced signature instead of the composed graphs: the
        faster baseline, where the composed module was slower (training_speed)."""
        self.__dict__["_step_fallback"] = fallback

    def _speed_fallback(self, args: tuple) -> Callable | None:
        return self._step_fallback

    @property
    def handed_over(self) -> bool:
        """Whether the never-slower check in training gave calls to a faster baseline."""
        return self._step_fallback is not None or bool(self.__dict__.get("_bucket_fallbacks"))

    def _has_plan(self) -> bool:
        return True   # the composed graphs are in `graphs`, not in graph_module

    def outside_reason(self, args: tuple) -> str | None:
        """Why a call is not the traced one (None: it is)."""
        if _signature(args) != self.planned_signature:
            return f"traced for {_describe(self.planned_signature)}"
        return None

    def forward(self, *args, **kwargs):
        why = "keyword arguments" if kwargs else self.outside_reason(args)
        if why is not None:
            return self._outside_plan(_signature(args), why, args, kwargs)
        # A call handed to a faster baseline (the original, or torch.compile of it, which guards
        # on the module's state itself) needs no walk over the module's parameters and flags.
        fallback = self._speed_fallback(args)
        if fallback is not None:
            return fallback(*args)
        if autograd_state(self.original, args) != self._traced_state:
            self._warn_once(("autograd",), "the module's training flags, its parameters (or which "
                            "require grad), which inputs require grad or the autocast state differ "
                            "from when it was traced for training; running the original module")
            return self.original(*args)
        outputs = refuse_double_backward(self._trainable(*args))
        return pytree.tree_unflatten(list(outputs), self._spec)


def optimize_for_training(module: torch.nn.Module, example_inputs: tuple, compose_graph: Callable,
                          *, strict: bool = False, cuda_graphs: bool = False, patterns: Any = None,
                          forms_dir: Path | None = None) -> ComposedModule:
    """The module through AOTAutograd with `compose_graph(graph, inputs, which)` composing each
    graph. A module AOTAutograd cannot trace, or whose composed forward would save more
    activations for the backward than the original does (training_memory: gradient
    checkpointing), comes back with nothing composed (the original runs, and trains) and the
    reason. cuda_graphs: replay the composed forward and backward graphs through CUDA graph
    trees where they can be (fact.compose.training_graphs); the report's cuda_graphs says which.
    The module is traced with the engine's training forms in (fact.compose.training_forms: the
    engine's discovery, over `patterns` as fact.optimize's, written to forms_dir or a fresh
    folder); the report's notes say which, and what is traced as written."""
    device = next((str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)), "cpu")
    flat = _FlatOutputs(module)
    traced, form_notes = trace_training_forms(flat, example_inputs, forms_dir, patterns)
    graphs = TrainingGraphs(len(example_inputs)) if cuda_graphs else None
    compilers = GraphCompilers(compose_graph, graphs)
    try:
        trainable = aot_compile(traced, example_inputs, compilers)
    except Exception as error:  # noqa: BLE001 - any tracing failure: the original trains
        report = FactReport(precision="", device=device, capture="AOTAutograd")
        report.leave("module", f"cannot be exported for training (AOTAutograd: {_first_line(error)})",
                     stage="module")
        report.runs = "the original eagerly"
        return ComposedModule(module, None, None, report)
    report = training_report(compilers.reports(), device)
    report.notes.extend(form_notes)
    if graphs is not None:
        report.cuda_graphs = graphs.describe()
    composed = TrainingComposedModule(module, trainable, flat.spec, _signature(example_inputs),
                                      autograd_state(module, example_inputs), report,
                                      dict(compilers.composed), strict=strict)
    return within_memory_rule(module, composed, example_inputs)


def within_memory_rule(module: torch.nn.Module, composed: ComposedModule,
                       example_inputs: tuple) -> ComposedModule:
    """`composed`, or the original with nothing composed when its forward saves more for the
    backward than the original's (training_memory.activation_memory_refusal; the reason goes
    to the report, stage `memory`)."""
    refusal = activation_memory_refusal(module, composed, example_inputs)
    if refusal is None:
        return composed
    report = composed.fact_report
    report.leave("module", refusal, stage="memory")
    report.runs = "the original eagerly"
    return ComposedModule(module, None, None, report)


def graph_work_dir(work_dir: str | Path | None, which: str) -> Path | None:
    """Where a graph's plan goes: `<work_dir>/<forward|backward>`, or a fresh folder (None)."""
    return Path(work_dir) / which if work_dir is not None else None
