"""`apply_plan`: a saved plan applied to a module with no engine (docs/compose.md)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

import torch
import torch.fx

from fact import _engine, module_state, ops, transforms
from fact import verify as checks
from fact.compose.bucket_speed import edge_inputs, never_slower_per_bucket
from fact.compose.dynamic_checks import SizedExamples, check_at_assignments, nodes_to_keep
from fact.compose.dynamic_plan import SymbolBinding
from fact.compose.range_guard import RangeGuard
from fact.symbolic_sizes import BucketTable, evaluate, parse_size
from fact.compose.guards import (SLOWER_BY, _capture_cuda_graph, _shape_cuda_graphs, graphs_unsafe, _compile_remainder, _compiled_original,
                                 _faster_of_compiled_and_eager, _faster_than_their_subgraphs,
                                 _host_kernel_timer, _module_timer, _never_slower, _replacement_timer,
                                 registry_speed_refusal)
from fact.compose.inputs import _device_of, _export, _input_specs, _normalize_inputs, _normalize_patterns, _selected
from fact.compose.module import ComposedModule, ReplacedSubgraph
from fact.compose.plan_file import load_plan, replacement_label
from fact.compose.resolve import _Decline, _Planned, _resolve, _tolerances
from fact.compose.rewrite import _DerivedBuffer, _insert, _register_derived, _source_value, _stable_topological_sort
from fact.compose.signature import _first_line, _signature
from fact.kernels import KernelLoadError
from fact.report import ComposedCall, ComposedReplacement, FactReport
from fact.timing import Timer

REMAINDERS = ("inductor", "eager")


@module_state.leaves_module_state_alone
def apply_plan(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, plan_dir: str | Path,
               *, remainder: str = "inductor", cuda_graphs: bool | None = None,
               patterns: Iterable[str] | str | None = None, verify: bool = True,
               kernel_dir: str | Path | None = None, report_path: str | Path | None = None,
               speed_guard: Union[bool, Timer] = True,
               replacement_guard: Union[bool, Timer, None] = None,
               exported: torch.export.ExportedProgram | None = None,
               plan_document: dict | None = None, dynamic_shapes: Any = None,
               strict: bool = False) -> ComposedModule:
    """Applies a plan (docs/plan.md, written by the engine) to `module`; no engine needed.

    The inputs must have the plan's shapes and dtypes. On CUDA the calls run their kernel
    libraries (relative paths resolve against `kernel_dir`, default the plan's folder); on the
    CPU the host reference (fact_reference_call). `patterns` narrows the plan's selection
    (rule or pattern names). `verify`: check each replacement against the subgraph it replaces
    (fact.verify) and leave failing ones to PyTorch. `remainder`: "inductor" compiles the
    PyTorch rest (and, when nothing is composed, the original module), "eager" runs it as is.
    `speed_guard`: on CUDA, time the composed forward against torch.compile of the original
    and the original run eagerly, and run the faster of those when the composed one is slower
    than it by more than 2% (with nothing composed: the original eagerly where that beats its
    torch.compile by more than 2%); False turns this off
    (benchmarks of the raw composed module); a callable (fn -> milliseconds) is the timer to
    use, on any device. `replacement_guard`: on CUDA, time each verified replacement's calls
    against the subgraph it replaces, run eagerly by PyTorch on the same inputs
    (fact.replacement_speed), and leave it to PyTorch (stage "speed") when its calls are slower
    by more than 2%; None (default) follows bool(speed_guard), False turns it off, a callable
    (fn -> milliseconds, given the calls' run, then the subgraph's) is the timer to use, on
    any device. `exported`: torch.export of this `module` on these inputs, already made (the
capture the plan was made from: fact.graph_capture.capture_exported), so the plan's node names
are that program's; None exports here. `plan_document`: the plan itself, already in memory
(`plan_dir` then only anchors its relative kernel paths); None reads it from `plan_dir`.
    A plan over declared ranges (top-level "symbols", docs/dynamic_shapes.md) is applied to the
    program exported with those dynamic dimensions (`exported`, or exported here with
    `dynamic_shapes`, by default the plan's own bindings): each call gets the symbols' sizes
    from the inputs, each replacement is verified at several sizes, the remainder is compiled
    with symbolic shapes and warmed at every bucket edge, the never-slower check runs per bucket,
    and the module's guard is the ranges (`strict`: a call outside them raises ValueError
    instead of running the original). Writes the report to `report_path` when given. Raises ValueError for an
    unknown remainder or a document that is not a plan; anything else is reported."""
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, not '{remainder}'")
    doc, folder = load_plan(plan_dir, plan_document)
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    precision = doc.get("precision", "")
    report = FactReport(precision=precision, device=str(device), capture=doc.get("capture", ""),
                        work_dir=str(folder), notes=list(doc.get("notes", [])))
    if cuda_graphs:
        report.cuda_graphs = "off (asked for; not reached: nothing composed)"
    elif cuda_graphs is None:
        report.cuda_graphs = "off (nothing composed)"
    signature = _signature(example_inputs)
    symbols = list(doc.get("symbols") or [])
    guard = None
    report.symbols = [{k: s.get(k) for k in ("name", "min", "max", "hint", "multiple", "edges") if k in s}
                      for s in symbols]

    def done(composed: ComposedModule) -> ComposedModule:
        report.op_implementation = ops.describe_implementation(device.type)
        if any(entry.implementation == "host kernels" for entry in report.composed):
            report.op_implementation += "; host kernel libraries (registry kernels for the CPU path) for the " \
                                        "replacements marked 'host kernels'"
        if report_path is not None:
            Path(report_path).write_text(json.dumps(report.to_json(), indent=2) + "\n")
        return composed

    def unoptimized(reason: str | None) -> ComposedModule:
        """The module with nothing composed: torch.compile of it for the planned signature
        (remainder "inductor"), else as it is."""
        if reason:
            report.leave("module", reason, stage="module")
        composed = ComposedModule(module, None, None if guard else signature, report,
                                  range_guard=guard, strict=strict)
        if remainder == "inductor":
            compiled, why_not = _compiled_original(module, example_inputs, [] if guard else None)
            if compiled is not None:
                report.remainder = "inductor"
                report.runs = "torch.compile of the original (nothing composed)"
                timer = _module_timer(speed_guard, device.type == "cuda")
                composed.__dict__["_fallback"] = compiled if timer is None else \
                    _faster_of_compiled_and_eager(module, compiled, example_inputs, timer, report)
            else:
                report.remainder = f"eager ({why_not})"
                report.runs = f"the original eagerly (nothing composed; {why_not})"
        else:
            report.remainder = "eager"
            report.runs = "the original eagerly (nothing composed)"
        return done(composed)

    if doc.get("status") != "planned":
        return unoptimized(doc.get("reason") or "not planned")
    if device.type == "cpu" and precision == "tf32":
        return unoptimized("precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are on "
                           "the CPU, where only 'strict' and 'native' compose (with the host "
                           "reference)")
    if device.type not in ("cpu", "cuda"):
        return unoptimized(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                           f"(host reference) only")
    given = _input_specs(example_inputs)
    if symbols:
        try:
            guard = RangeGuard(symbols, doc.get("inputs") or [], example_inputs)
        except (ValueError, KeyError, TypeError) as error:
            return unoptimized(f"the plan's symbolic inputs cannot be read: {error}")
        sizes, why = guard.check(example_inputs)
        if sizes is None:
            guard = None
            return unoptimized(f"the example inputs are outside the plan's ranges: {why}")
    elif given != doc.get("inputs"):
        return unoptimized(f"inputs {given} differ from the plan's {doc.get('inputs')}; plan again "
                           f"for them")
    on_gpu = device.type == "cuda"
    if not on_gpu:
        try:
            _engine.reference_library()
        except _engine.EngineNotFound as error:
            return unoptimized(f"no host reference for the CPU path: {error}")
    if exported is None:
        try:
            exported = _export(module, example_inputs,
                               (dynamic_shapes if dynamic_shapes is not None else plan_dynamic_shapes(guard))
                               if guard else None)
        except Exception as error:  # noqa: BLE001 - any export failure leaves the module as is
            return unoptimized(f"cannot be exported with torch.export ({_first_line(error)})")

    # No in-graph guard function, and no input validation by torch.export's pre-forward hook
    # (a Python check of every placeholder's sizes against the range constraints on every call
    # that is not a CUDA graph replay, training graphs included): ComposedModule's signature guard
    # checks shapes, dtypes, devices, strides and alignment, and the range guard a declared
    # range's sizes, before the graph runs.
    graph_module = exported.module(check_guards=False)
    graph_module.validate_inputs = False
    graph = graph_module.graph
    binding = None
    if guard is not None:
        try:
            binding = SymbolBinding(doc, guard, graph_module)
        except (ValueError, KeyError, StopIteration) as error:
            return unoptimized(f"the plan's symbols do not match the exported program: {error}")
    by_name = {node.name: node for node in graph.nodes}
    # The plan names the user inputs as the exported program does; unlifting may rename them
    # (`input` -> `input_1`: FX avoids Python builtins). Map them by position.
    user_inputs = [spec.arg.name for spec in exported.graph_signature.input_specs
                   if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
                   and hasattr(spec.arg, "name")]
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    if len(user_inputs) == len(placeholders):
        for lifted_name, node in zip(user_inputs, placeholders):
            by_name.setdefault(lifted_name, node)
    by_target = {node.target: node for node in graph.nodes if node.op == "get_attr"}
    library_root = Path(kernel_dir) if kernel_dir is not None else folder
    plan_selection = doc.get("patterns")
    selected = _normalize_patterns(patterns)
    replacements = doc.get("replacements", []) or []
    for name in sorted(set(selected or []) | set(plan_selection or [])):
        if not any(r.get("rule") == name or r.get("pattern") == name for r in replacements):
            report.notes.append(f"patterns: '{name}' names no replacement of this module")
    if not verify:
        report.notes.append("verify=False: the replacements were not checked against the "
                            "subgraphs they replace")

    # 1. Map and check every planned, selected replacement against the untouched graph.
    claimed: dict[torch.fx.Node, str] = {}
    candidates: list[_Planned] = []
    for replacement in replacements:
        what = replacement_label(replacement)
        rid = replacement.get("id")
        if replacement.get("status") != "planned":
            report.leave(what, f"{replacement.get('status', '?')}: {replacement.get('reason', '')}".rstrip(": "),
                         rid, "plan")
            continue
        if not _selected(replacement, plan_selection) or not _selected(replacement, selected):
            chosen = selected if not _selected(replacement, selected) else plan_selection
            report.leave(what, f"not selected (patterns={', '.join(chosen)})", rid, "selection")
            continue
        slow = registry_speed_refusal(replacement)
        if slow:
            report.leave(what, slow, rid, "speed")
            continue
        try:
            planned = _resolve(replacement, doc, graph_module, by_name, by_target, claimed,
                               on_gpu, library_root, binding)
            planned.lifted = checks.lift(graph_module, planned.nodes, list(planned.outputs.values()))
        except _Decline as decline:
            report.leave(what, str(decline), rid, "check")
            continue
        except ValueError as error:
            report.leave(what, str(error), rid, "check")
            continue
        for node in planned.nodes:
            claimed[node] = what
        candidates.append(planned)

    # 2. Register the calls, verify each replacement against the subgraph it replaces, and
    #    leave those slower than it to PyTorch.
    started = time.perf_counter()
    time_each, replacement_timer = _replacement_timer(replacement_guard, speed_guard, on_gpu)
    if binding is not None and time_each:
        time_each = False
        report.notes.append("a plan over declared ranges: replacements are not timed one by one; the "
                            "never-slower check runs per bucket tuple on the whole module")
    examples = {}
    sized_examples: SizedExamples | None = None
    if binding is not None and verify and candidates:
        # the graph's values at each assignment are made when the first check reads them
        sized_examples = SizedExamples(graph_module, binding, example_inputs, nodes_to_keep(candidates), on_gpu)
    elif (verify or time_each) and candidates:
        needed = set()
        for p in candidates:
            read = checks.operand_nodes(p.values, [checks.CallToCheck(-1, c.label, c.operands, c.results)
                                                   for c in p.calls])
            needed |= {node for node in [*p.lifted.inputs, *p.values.values()]
                       if checks.keeps_example_value(node, read)}
        try:
            examples = checks.example_values(graph_module, example_inputs, needed)
        except Exception as error:  # noqa: BLE001 - then those replacements cannot be checked
            report.notes.append(f"example values for the checks: {_first_line(error)}")
    accepted: list[tuple[_Planned, ComposedReplacement]] = []
    for index, planned in enumerate(candidates):
        rid = planned.doc.get("id")
        planned.seed = 1000 + index
        try:
            for call in planned.calls:
                call.id = ops.register_call(call.doc, call.library, entry=call.entry,
                                            symbols=symbols or None, bucket_libraries=call.buckets)
        except (ValueError, KernelLoadError, RuntimeError) as error:
            report.leave(planned.what, f"call {call.label}: {error}", rid, "check")
            continue
        try:
            planned.tensors = {vid: transforms.evaluate(entry, [_source_value(graph_module, node)
                                                               for node in sources])
                               for vid, (entry, sources) in planned.derived.items()}
        except transforms.TransformError as error:
            report.leave(planned.what, str(error), rid, "check")
            continue
        entry = ComposedReplacement(
            id=rid if rid is not None else index, label=str(planned.doc.get("label", rid)),
            rule=str(planned.doc.get("rule", "")), pattern=str(planned.doc.get("pattern", "")),
            nodes=list(planned.doc.get("nodes", [])), note=str(planned.doc.get("note", "")),
            implementation="kernels" if on_gpu else ("host kernels" if all(c.library for c in planned.calls)
                                                     else "host reference"),
            calls=[ComposedCall(label=c.label, kind=str(c.doc.get("kind", "")),
                                summary=str(c.doc.get("summary", "")),
                                config=str(c.doc.get("config") or ""),
                                config_source=str(c.doc.get("config_source") or ""),
                                kernel=str(c.kernel.get("name", "")), tolerance=c.tolerance)
                   for c in planned.calls])
        if verify:
            tolerances = _tolerances(planned)
            if any(value is None for value in tolerances.values()):
                report.leave(planned.what, "the plan gives no tolerance to verify against", rid, "verify")
                continue
            if binding is not None:
                try:
                    verdict = check_at_assignments(planned, sized_examples, tolerances, device)
                except Exception as error:  # noqa: BLE001 - the graph does not run at those sizes
                    verdict = checks.Verdict(f"the graph's values at the verification sizes: "
                                             f"{_first_line(error)}")
            else:
                verdict = checks.check(
                    planned.lifted, graph_module, planned.values,
                    [checks.CallToCheck(c.id, c.label, c.operands, c.results) for c in planned.calls],
                    list(planned.outputs), tolerances, device, seed=planned.seed, examples=examples,
                    derived=planned.derived)
            entry.errors = verdict.errors
            entry.rel_err, entry.tolerance = verdict.worst
            if verdict.failure:
                report.leave(planned.what, f"verification failed: {verdict.failure}", rid, "verify")
                continue
            entry.verified = True
        accepted.append((planned, entry))
    if sized_examples is not None:
        report.notes += sized_examples.notes
    report.add_time("verify", time.perf_counter() - started)
    started = time.perf_counter()
    if time_each:
        accepted = _faster_than_their_subgraphs(accepted, graph_module, examples, device,
                                                replacement_timer, report,
                                                inductor_remainder=remainder == "inductor")
    elif on_gpu and accepted:
        report.notes.append("replacement_guard off: the replacements were not timed against the "
                            "subgraphs they replace")
    host_timer = _host_kernel_timer(replacement_guard, speed_guard, on_gpu) if binding is None else None
    hosted = [pair for pair in accepted if pair[1].implementation == "host kernels"]
    if host_timer is not None and hosted:
        # The CPU path runs host kernels (registry kernels) for real: none slower than PyTorch.
        kept = {id(planned) for planned, _ in _faster_than_their_subgraphs(hosted, graph_module, examples,
                                                                            device, host_timer, report)}
        accepted = [pair for pair in accepted if pair[1].implementation != "host kernels" or id(pair[0]) in kept]
    elif not on_gpu and not time_each and hosted:
        report.notes.append("replacement_guard off: the host kernels were not timed against the subgraphs "
                            "they replace (one slower than PyTorch may be composed)")

    report.add_time("time replacements", time.perf_counter() - started)
    if not accepted:
        return unoptimized(None)

    # 3. Rewrite: one fact::launch per call, then a valid order again.
    def where(node):
        return (node.name, node.op, str(node.target))

    subgraphs = [ReplacedSubgraph(
        label=entry.label, rule=entry.rule, summary="; ".join(c.summary for c in entry.calls),
        kernels=[c.kernel for c in entry.calls], module=planned.lifted.module,
        inputs=[where(node) for node in planned.lifted.inputs],
        values={vid: where(node) for vid, node in planned.values.items()},
        calls=[(c.id, list(c.operands), [r[0] for r in c.results]) for c in planned.calls],
        outputs=list(planned.outputs), derived=dict(planned.tensors))
        for planned, entry in accepted]
    redirect: dict = {}
    refresh: list[_DerivedBuffer] = []
    size_nodes = binding.sizes_from_graph(graph) if binding is not None else None
    at_hint = _at_hint(binding, len(symbols)) if binding is not None else None
    for planned, entry in accepted:
        refresh += _register_derived(graph_module, planned)
        if planned.derived:
            entry.derived = [f"{vid}: {doc.get('purpose') or 'derived'}"
                             for vid, (doc, _) in planned.derived.items()]
        kept = _insert(graph, planned, redirect, size_nodes, at_hint)
        if kept:
            report.notes.append(f"{planned.what}: nodes {', '.join(kept)} stay (still used "
                                f"outside the replacement)")
        report.composed.append(entry)
    _stable_topological_sort(graph)
    graph.lint()
    graph_module.recompile()

    composed = ComposedModule(module, graph_module, None if guard else signature, report,
                              range_guard=guard, strict=strict)
    composed.__dict__["replacements"] = subgraphs
    composed.__dict__["_derived"] = refresh
    composed.__dict__["_state"] = module_state.state_bindings(module, graph_module)
    for state in composed._state:
        if state.kind != "written attribute":
            continue
        report.notes.append(f"state: the forward writes the tensor attribute '{state.qualified}'; "
                            f"the composed module writes it back after each call")
    report.runs = "composed"
    buckets = []
    if binding is not None:
        table = BucketTable.from_symbols(symbols)
        composed.__dict__["_bucket_table"] = table
        buckets = edge_inputs(binding, table, example_inputs)
    started = time.perf_counter()
    if remainder == "inductor":
        _compile_remainder(composed, example_inputs, [inputs for *_, inputs in buckets] if binding else None)
        report.add_time("compile remainder", time.perf_counter() - started)
    else:
        report.remainder = "eager"
    started = time.perf_counter()
    why_not_graphs = graphs_unsafe(exported)
    if cuda_graphs is None:
        # the default: graphs where the calls are bound by the host's launches (shape_graphs)
        if not on_gpu:
            report.cuda_graphs = f"off (CUDA graphs need CUDA inputs, these are on {device.type})"
        elif why_not_graphs:
            report.cuda_graphs = f"off ({why_not_graphs})"
        else:
            _shape_cuda_graphs(composed)
    elif cuda_graphs and why_not_graphs:
        report.cuda_graphs = f"off (asked for; {why_not_graphs})"
    elif cuda_graphs and binding is not None:
        if on_gpu:
            _shape_cuda_graphs(composed)
        else:
            report.cuda_graphs = f"off (asked for; CUDA graphs need CUDA inputs, these are on {device.type})"
    elif cuda_graphs:
        if on_gpu:
            _capture_cuda_graph(composed, example_inputs)
        else:
            report.cuda_graphs = f"off (asked for; CUDA graphs need CUDA inputs, these are on {device.type})"
    if cuda_graphs and on_gpu and not why_not_graphs:
        report.add_time("CUDA graphs", time.perf_counter() - started)
    started = time.perf_counter()
    timer = _module_timer(speed_guard, on_gpu)
    if timer is not None and binding is not None:
        compiled, why_not = _compiled_original(module, example_inputs, [inputs for *_, inputs in buckets])
        if compiled is None:
            report.notes.append(f"torch.compile of the original (dynamic): {why_not}")
        never_slower_per_bucket(composed, module, compiled, buckets, binding, timer, SLOWER_BY)
    elif timer is not None:
        _never_slower(composed, module, example_inputs, timer)
    elif not speed_guard:
        report.notes.append("speed_guard=False: not compared with torch.compile of the original")
    if timer is not None:
        report.add_time("never-slower check", time.perf_counter() - started)
    return done(composed)


def plan_dynamic_shapes(guard: RangeGuard) -> tuple:
    """torch.export's dynamic_shapes from the plan's own bindings: every input dimension that
    is one symbol is that symbol's range."""
    from fact.dynamic_ranges import Range
    ranges = [Range(s.name, s.min, s.max, s.multiple) for s in guard.symbols]
    shapes: list = [None] * len(guard.rules)
    for index, dim, symbol in guard.bindings:
        shapes[index] = {**(shapes[index] or {}), dim: ranges[symbol]}
    return tuple(shapes)


def _at_hint(binding: SymbolBinding, count: int):
    """A plan size (int or {"expr", "poly"}) or a program SymInt at the symbols' hints."""
    hint = tuple(int(s.get("hint", s["min"])) for s in binding.symbols)

    def at_hint(value: Any) -> int:
        if isinstance(value, dict):
            return int(evaluate(parse_size(value, count), hint))
        return binding.concrete(value, hint)
    return at_hint
