"""Training forms: where the engine says that PyTorch computes a matched subgraph with a fused
backward FACT has no kernel for (a match's problem carries a `training_form`, docs/plan.md),
the module is traced for training with that op in place of the subgraph, before AOTAutograd
splits it into forward and backward graphs (docs/compose.md, "Training", "Training forms").

A form names an op (`aten.scaled_dot_product_attention.default` for a written-out attention),
the captured node whose call returns its result (`replaces`), where each of its arguments comes
from (an argument of the call of a captured node, optionally transposed) and its keyword
arguments. Nothing here knows what the op computes: the engine wrote the form.

    training_forms(discovery, graph)   the forms to trace, and (what, why) for the declined ones
    TracedForms(module, forms)         the module with the forms traced in, at every call
    verify_forms(module, traced, inputs)   outputs and gradients against float64 of the original
    trace_training_forms(...)          all three: the module to trace and the report's notes

How a form is traced in: export records one node per call of a function, in call order, so a
captured node is "the n-th call of its target". `TracedForms` runs the module under a
torch-function mode that counts those calls (for the targets in CALLS): at a node a form reads
it keeps the call's arguments (the call itself runs as written; what only reads its result is
dead code once the form replaces the last node, and AOTAutograd drops it), at the node it
replaces it returns the form's op. Each argument's shape is checked against the captured
graph's; a mismatch raises, and the module is then traced as written.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.overrides import TorchFunctionMode

from fact.compose.signature import _first_line
from fact.measure import _fresh_like, _relative_error, float64_in_place
from fact.module_state import preserved_state

# The Python-level calls export records as one node of each target: the nodes a form can name.
CALLS = {
    "aten.matmul.default": (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__),
    "aten.bmm.default": (torch.bmm, torch.Tensor.bmm),
}
_TARGET_OF = {fn: target for target, fns in CALLS.items() for fn in fns}


@dataclass(frozen=True)
class FormArg:
    call: tuple          # (target, index): the call whose argument it is
    position: int        # the argument's position in that call
    transpose: tuple     # dims to transpose it over, or ()
    shape: tuple         # its shape in the captured graph


@dataclass(frozen=True)
class Form:
    """One training form, resolved against the captured graph."""
    label: str           # "attention at view_2..reshape": the match it replaces
    op: Any              # the OpOverload
    op_name: str
    replaces: tuple      # (target, index) of the call that returns the op's result
    args: tuple          # FormArg per positional argument
    kwargs: tuple        # (name, value) pairs
    what: str            # the engine's words for it


class FormMismatch(RuntimeError):
    """A call a form reads is not what the captured graph recorded (another shape, or missing)."""


def _resolve_op(name: str) -> Any:
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def training_forms(discovery: dict, graph: dict) -> tuple[list[Form], list[tuple[str, str]]]:
    """The matches of `discovery` (discovery.json) whose problem carries a training form, as
    Forms; (what, why) for those whose form the engine declined or that name a node this
    cannot trace by its calls. `graph`: the captured graph JSON the engine read."""
    values = {v["id"]: v for v in graph.get("values", [])}
    calls: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    node_args: dict[str, list] = {}
    for node in graph.get("nodes", []):
        target = node.get("target", "")
        node_args[node["id"]] = node.get("args", [])
        if target in CALLS:
            calls[node["id"]] = (target, counts.get(target, 0))
            counts[target] = counts.get(target, 0) + 1
    forms, left = [], []
    for match in discovery.get("matches", []):
        for problem in match.get("problems", []):
            form = problem.get("training_form")
            if not isinstance(form, dict):
                continue
            names = match.get("nodes", [])
            label = f"{match.get('pattern', 'match')} at {names[0]}..{names[-1]}" if names else match.get("pattern", "")
            if "declined" in form:
                left.append((label, form["declined"]))
                continue
            named = [form["replaces"]] + [a["node"] for a in form["args"]]
            untraced = sorted({n for n in named if n not in calls})
            if untraced:
                left.append((label, f"its form reads {', '.join(untraced)}, not a call traced by call "
                                   f"({', '.join(CALLS)})"))
                continue
            args = []
            for a in form["args"]:
                tensors = [x.get("tensor") for x in node_args[a["node"]] if isinstance(x, dict)]
                value = values.get(tensors[a["arg"]]) if a["arg"] < len(tensors) else None
                args.append(FormArg(calls[a["node"]], int(a["arg"]), tuple(a.get("transpose", ())),
                                    tuple(value["shape"]) if value else ()))
            forms.append(Form(label=label, op=_resolve_op(form["op"]), op_name=form["op"],
                              replaces=calls[form["replaces"]], args=tuple(args),
                              kwargs=tuple(sorted(form.get("kwargs", {}).items())), what=form.get("what", "")))
    return forms, left


class _FormsMode(TorchFunctionMode):
    """One forward's calls (see the module docstring)."""

    def __init__(self, forms: Sequence[Form]):
        super().__init__()
        self.replaced = {f.replaces: f for f in forms}
        self.read = {a.call for f in forms for a in f.args}
        self.counts: dict[str, int] = {}
        self.kept: dict = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = _TARGET_OF.get(func)
        if target is None:
            return func(*args, **kwargs)
        call = (target, self.counts.get(target, 0))
        self.counts[target] = call[1] + 1
        if call in self.read:
            self.kept[call] = args
        form = self.replaced.get(call)
        if form is None:
            return func(*args, **kwargs)
        operands = []
        for a in form.args:
            if a.call not in self.kept:
                raise FormMismatch(f"{form.label}: the call it reads as {a.call} did not happen first")
            value = self.kept[a.call][a.position]
            if tuple(value.shape) != a.shape:
                raise FormMismatch(f"{form.label}: argument of {tuple(value.shape)}, captured as {a.shape}")
            operands.append(value.transpose(*a.transpose) if a.transpose else value)
        return form.op(*operands, **dict(form.kwargs))


class TracedForms(torch.nn.Module):
    """`module` (its parameters and buffers its own) with `forms` traced in at every call."""

    def __init__(self, module: torch.nn.Module, forms: Sequence[Form]):
        super().__init__()
        self.module = module
        self.forms = tuple(forms)

    def forward(self, *args: Any) -> Any:
        mode = _FormsMode(self.forms)
        with mode:
            out = self.module(*args)
        missing = [f.label for f in self.forms if f.replaces[1] >= mode.counts.get(f.replaces[0], 0)]
        if missing:
            raise FormMismatch(f"calls the forms replace did not happen: {', '.join(missing)}")
        return out


def _outputs_and_gradients(module: torch.nn.Module, inputs: tuple, seed: int,
                           precision: str) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of the module's floating outputs, then of the gradients of Σ output·cotangent
    (cotangents drawn from `seed`) with respect to its parameters and the inputs that require
    grad. `precision`: "float64" (inputs converted, autocast off; the module converted by the
    caller), "autocast off" (the module's own dtypes) or "under autocast" (the autocast active
    now)."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if precision == "float64":
        inputs = tuple(x.detach().double().requires_grad_(x.requires_grad)
                       if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x for x in inputs)
    device_type = next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")
    cuda = [x.device for x in inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"][:1]
    autocast = precision == "under autocast" and torch.is_autocast_enabled(device_type)
    if autocast:
        # Autocast reuses the weight casts it made earlier in the caller's region (during the
        # capture too); with them a weight's gradient read zero here. A training step starts
        # its own region, so its casts are fresh: so are these.
        torch.clear_autocast_cache()
    with torch.random.fork_rng(devices=cuda), \
            torch.autocast(device_type, dtype=torch.get_autocast_dtype(device_type), enabled=autocast):
        torch.manual_seed(seed)
        outs = [o for o in torch.utils._pytree.tree_leaves(module(*inputs))
                if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]
    generator = torch.Generator().manual_seed(seed + 1)
    cotangents = [torch.randn(o.shape, generator=generator).to(o.device, o.dtype) for o in outs]
    wrt = named + [(f"input {i}", x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    differentiable = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
    # The backward outside autocast, as a training loop calls it: autograd runs the backward
    # under the caller's autocast state, which would round a float64 or an autocast-off
    # backward's products to bf16 too.
    with torch.autocast(device_type, enabled=False):
        grads = torch.autograd.grad([o for o, _ in differentiable], [w for _, w in wrt],
                                    [c for _, c in differentiable], allow_unused=True) \
            if wrt and differentiable else [None] * len(wrt)
    return ([(f"output {i}", o.detach()) for i, o in enumerate(outs)] +
            [(f"gradient of {name}", g.detach() if g is not None else torch.zeros_like(w))
             for g, (name, w) in zip(grads, wrt)])


def verify_forms(module: torch.nn.Module, traced: torch.nn.Module, example_inputs: tuple,
                 floor: float = 1e-5) -> tuple[bool, str]:
    """(ok, what was measured): `traced`'s outputs and gradients on fresh inputs against float64
    of the original `module` (fact.measure.float64_in_place: its parameters, buffers and plain
    tensor attributes), each within twice the original's own error (at least `floor`).

    Checked with autocast off (the module's own dtypes): there a form that computes something
    else shows, whatever the precision. Under an active autocast, checked there too: in bf16 a
    gradient can be mostly rounding (a key projection's, when the scores are nearly uniform),
    and only the first check tells a wrong form from rounding."""
    inputs = tuple(x.requires_grad_(e.requires_grad) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                   for x, e in zip(_fresh_like(example_inputs, 20261129), example_inputs))
    device_type = next((x.device.type for x in inputs if isinstance(x, torch.Tensor)), "cpu")
    precisions = ["autocast off"] + (["under autocast"] if torch.is_autocast_enabled(device_type) else [])
    with float64_in_place(module):
        expected = _outputs_and_gradients(module, inputs, 7, "float64")
    measured = []
    for precision in precisions:
        with preserved_state(module):  # running statistics and other state as the user gave them
            original = _outputs_and_gradients(module, inputs, 7, precision)
            candidate = _outputs_and_gradients(traced, inputs, 7, precision)
        if not len(expected) == len(original) == len(candidate):
            return False, "the traced module returned other outputs or gradients"
        worst = (0.0, 0.0, "")
        for (name, ref), (_, a), (_, b) in zip(expected, original, candidate):
            if ref.numel() == 0:
                continue
            e_original, e_traced = _relative_error(a, ref), _relative_error(b, ref)
            if not e_traced <= max(2.0 * e_original, floor):  # NaN fails too
                return False, (f"outputs or gradients off ({precision}): "
                               f"{name} at rel_err {e_traced:.2e} against float64, as written {e_original:.2e}")
            worst = max(worst, (e_traced, e_original, name))
        measured.append(f"{precision} within rel_err {worst[0]:.1e} of float64 (as written {worst[1]:.1e}, {worst[2]})")
    return True, "outputs and gradients " + "; ".join(measured)


def trace_training_forms(module: torch.nn.Module, example_inputs: tuple, work_dir: str | Path | None = None,
                         patterns: Any = None) -> tuple[torch.nn.Module, list[str]]:
    """`module` with the engine's training forms traced in (TracedForms), or `module` itself when
    there is none or they fail verify_forms; and the report's notes: what was traced in, and
    what is traced as written and why. The engine's discovery (no kernel compiled, `patterns`
    as fact.optimize's) writes to `work_dir`. Nothing here raises: a capture or engine failure
    leaves the module as it is, with the reason."""
    traced, notes, left = _trace(module, example_inputs, work_dir, patterns)
    return traced, notes + [f"{what}: traced as written for training ({why})" for what, why in left]


def _trace(module: torch.nn.Module, example_inputs: tuple, work_dir: str | Path | None,
           patterns: Any) -> tuple[torch.nn.Module, list[str], list[tuple[str, str]]]:
    from fact.compose.planning import plan_and_export  # planning imports the compose package

    try:
        folder, exported = plan_and_export(module, example_inputs, None, work_dir=work_dir, patterns=patterns,
                                           compile_kernels=False)
        discovery_file, graph_file = Path(folder) / "discovery.json", Path(folder) / "graph.json"
        if exported is None or not discovery_file.is_file() or not graph_file.is_file():
            return module, [], []
        forms, left = training_forms(json.loads(discovery_file.read_text()), json.loads(graph_file.read_text()))
    except Exception as error:  # noqa: BLE001 - the module trains as written
        return module, [], [("training forms", f"not looked for: {_first_line(error)}")]
    if not forms:
        return module, [], left
    traced = TracedForms(module, forms)
    labels = ", ".join(f.label for f in forms)
    try:
        ok, measured = verify_forms(module, traced, example_inputs)
    except Exception as error:  # noqa: BLE001 - a mismatch or a failing run: as written
        ok, measured = False, f"the traced module failed: {_first_line(error)}"
    if not ok:
        return module, [], left + [(labels, f"kept as written: {measured}")]
    notes = [f"{f.label}: traced as {f.op_name}({', '.join(f'{k}={v}' for k, v in f.kwargs)}): {f.what}"
             for f in forms]
    notes.append(f"training forms ({labels}): {measured}")
    return traced, notes, left
