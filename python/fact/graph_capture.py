"""`capture(module, example_inputs)`: a module's forward pass as FACT graph JSON.

Traces with `torch.export.export` (non-strict) and writes the ATen graph it yields. When export
fails, warns, falls back to TorchDynamo (graph breaks allowed: each subgraph is traced to ATen
with make_fx and the pieces are linked by the tensors that pass between them) and records the
export failure in `source.export_error`.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.fx

from fact import module_state
from fact.graph_writer import SCHEMA, CaptureError, GraphWriter, flat_output_nodes, scalar_of, write_graph


# --------------------------------------------------------------------------------------------
# torch.export path


def _from_exported_program(ep: torch.export.ExportedProgram, symbol_names: dict | None = None
                           ) -> tuple[GraphWriter, list, list, dict]:
    from torch.export.graph_signature import InputKind, OutputKind

    writer = GraphWriter(symbol_names=symbol_names)
    spec_by_name = {spec.arg.name: spec for spec in ep.graph_signature.input_specs
                    if hasattr(spec.arg, "name")}
    kind_names = {InputKind.USER_INPUT: "input", InputKind.PARAMETER: "parameter",
                  InputKind.BUFFER: "buffer", InputKind.CONSTANT_TENSOR: "constant"}
    inputs: list[str] = []
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            spec = spec_by_name.get(node.name)
            kind = kind_names.get(spec.kind, "input") if spec is not None else "input"
            target = spec.target if spec is not None and kind != "input" else None
            scalar = None
            if kind == "constant" and target in ep.constants:
                scalar = scalar_of(ep.constants[target])
            elif kind == "buffer" and target is not None:
                data = ep.constants.get(target, ep.state_dict.get(target))
                scalar = scalar_of(data)
            writer.add_placeholder(node, kind, target, scalar)
            if kind == "input" and isinstance(writer.node_values.get(node), str):
                inputs.append(writer.node_values[node])
        elif node.op == "call_function":
            writer.add_call(node)
        elif node.op == "get_attr":
            writer.add_get_attr(node, ep.graph_module)

    output_specs = ep.graph_signature.output_specs
    outputs: list[str] = []
    mutations: dict[str, str] = {}
    for spec, out_node in zip(output_specs, flat_output_nodes(ep.graph)):
        bound = writer.node_values.get(out_node) if isinstance(out_node, torch.fx.Node) else None
        if not isinstance(bound, str):
            continue
        if spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(bound)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            mutations[bound] = spec.target
    return writer, inputs, outputs, mutations


def _export_over_ranges(module: torch.nn.Module, example_inputs: tuple, export_shapes: Any,
                        declared: dict) -> tuple[torch.export.ExportedProgram, list]:
    """torch.export with the declared dynamic dimensions. When torch.export refuses them for a
    guard it cannot prove over the range ("Constraints violated": e.g. Min(16*seq, 32*seq) ==
    16*seq, which holds for every size), the export is made again with the guards as run-time
    assertions, and kept only when every assertion holds at the sizes `range_check_sizes` picks
    across the declared ranges; otherwise the first refusal is raised."""
    try:
        return module_state.export_keeping_state(module, example_inputs, dynamic_shapes=export_shapes,
                                                 strict=False)
    except Exception as error:  # noqa: BLE001 - only a guard torch cannot prove is retried
        if "Constraints violated" not in str(error):
            raise
        refusal = error
    ep, writes = module_state.export_keeping_state(
        module, example_inputs, dynamic_shapes=export_shapes, strict=False,
        prefer_deferred_runtime_asserts_over_guards=True)
    names, _ = declared_symbols(ep, declared, example_inputs)
    ranges = {names_symbol: declared_range for (_, _), declared_range in declared.items()
              for names_symbol, name in names.items() if name == declared_range.name}
    failing = assertions_failing_in_ranges(ep, ranges)
    if failing:
        raise CaptureError(f"{_first_line_of(refusal)}; the guard fails inside the declared range "
                           f"at {failing[0]}") from refusal
    return ep, writes


def range_check_sizes(declared_range: Any, hint: int | None = None) -> list[int]:
    """Sizes of a declared range an assertion is checked at: the ends, the hint, every power of
    two inside and its neighbours, all rounded to the range's multiple."""
    lo, hi, multiple = declared_range.min, declared_range.max, declared_range.multiple
    candidates = {lo, hi} | ({hint} if hint is not None else set())
    power = 1
    while power <= hi:
        candidates |= {power - multiple, power, power + multiple}
        power *= 2
    return sorted(v for v in candidates if lo <= v <= hi and v % multiple == 0)


def assertions_failing_in_ranges(ep: torch.export.ExportedProgram, ranges: dict) -> list[str]:
    """The run-time assertions of the program (aten._assert_scalar) that fail, or cannot be
    decided, at some combination of range_check_sizes of the symbols they read (`ranges`:
    sympy symbol -> declared Range); each as "<expression> at <name>=<size>, ..."."""
    import itertools

    failing = []
    for node in ep.graph.nodes:
        if node.op != "call_function" or "_assert_scalar" not in str(node.target):
            continue
        condition = node.args[0] if node.args else None
        value = condition.meta.get("val") if isinstance(condition, torch.fx.Node) else None
        expr = getattr(getattr(value, "node", None), "expr", None)
        if expr is None:
            failing.append(f"an assertion FACT cannot read ({node.format_node()})")
            continue
        symbols = sorted(expr.free_symbols, key=str)
        if any(symbol not in ranges for symbol in symbols):
            failing.append(f"{expr} (it reads sizes that are not declared dimensions)")
            continue
        grids = [range_check_sizes(ranges[symbol]) for symbol in symbols]
        for sizes in itertools.islice(itertools.product(*grids), 4096):
            holds = expr.subs(dict(zip(symbols, sizes)))
            if holds is not True and bool(holds) is not True:
                failing.append(f"{expr} at " + ", ".join(f"{ranges[s].name}={v}" for s, v in zip(symbols, sizes)))
                break
    return failing


def _first_line_of(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]


def declared_symbols(ep: torch.export.ExportedProgram, declared: dict, example_inputs: Sequence[Any]
                     ) -> tuple[dict, list]:
    """(sympy symbol of the program -> declared name, the document's "symbols") for the
    declared dimensions {(input index, dim): fact.dynamic_ranges.Range}: each declared
    dimension of a user input placeholder must be one plain symbol of the program (CaptureError
    when torch.export specialized it or tied it to another expression)."""
    from torch.export.graph_signature import InputKind

    user = [spec.arg.name for spec in ep.graph_signature.input_specs
            if spec.kind == InputKind.USER_INPUT and hasattr(spec.arg, "name")]
    placeholders = {node.name: node for node in ep.graph.nodes if node.op == "placeholder"}
    names: dict = {}
    symbols: dict[str, dict] = {}
    for (index, dim), declared_range in sorted(declared.items(), key=lambda item: item[0]):
        node = placeholders.get(user[index]) if index < len(user) else None
        val = node.meta.get("val") if node is not None else None
        if not isinstance(val, torch.Tensor):
            raise CaptureError(f"input {index} of the exported program is not a tensor")
        size = val.shape[dim]
        expr = size.node.expr if isinstance(size, torch.SymInt) else None
        if expr is None or not expr.is_Symbol:
            raise CaptureError(f"{declared_range.name} (input {index} dim {dim}) is "
                               f"{'fixed at ' + str(int(size)) if expr is None or not expr.free_symbols else str(expr)} "
                               f"in the exported program: the forward specializes it (declare it "
                               f"static, or make the code size-generic)")
        if names.setdefault(expr, declared_range.name) != declared_range.name:
            raise CaptureError(f"{declared_range.name} and {names[expr]} are the same size in the "
                               f"exported program: declare one name for both")
        symbols.setdefault(declared_range.name, {
            "name": declared_range.name, "min": declared_range.min, "max": declared_range.max,
            "hint": int(example_inputs[index].shape[dim]), "multiple": declared_range.multiple,
            "typical": list(declared_range.typical)})
    return names, list(symbols.values())


# --------------------------------------------------------------------------------------------
# Dynamo fallback


def _forward_argument_names(module: torch.nn.Module, count: int) -> list[str]:
    try:
        parameters = [p for p in inspect.signature(module.forward).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        parameters = []
    names = [p.name for p in parameters[:count]]
    return names + [f"arg{i}" for i in range(len(names), count)]


def _attribute(root: torch.nn.Module, qualified: str) -> Any:
    for part in qualified.split("."):
        root = getattr(root, part)
    return root


def _capture_with_dynamo(module: torch.nn.Module, example_inputs: Sequence[Any]
                         ) -> tuple[GraphWriter, list, list, int]:
    """Runs the module under torch.compile with a backend that traces every subgraph to ATen
    (make_fx, pre-dispatch) and records each call of it; the calls, in order, are concatenated
    and linked by the tensors that pass between them. Returns (writer, inputs, outputs, number
    of subgraph calls)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    import torch._dynamo

    calls: list[tuple[torch.fx.GraphModule, list, Any]] = []

    def backend(gm: torch.fx.GraphModule, backend_inputs: list):
        # Outside dynamo's tracing context: make_fx would otherwise reuse dynamo's fake mode
        # and leave shape guards without a source in its ShapeEnv, which then fail dynamo's
        # guard building for the frame (IndexError in produce_guards; e.g. a broadcast in a
        # frame that ends at a data-dependent branch).
        with torch._guards.tracing(None):
            aten = make_fx(gm, tracing_mode="fake", pre_dispatch=True)(*backend_inputs)

        def run(*args):
            result = gm(*args)
            calls.append((aten, list(args), result))
            return result

        return run

    module_tensors: dict[int, tuple[str, str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        module_tensors.setdefault(id(p), ("parameter", name))
    for name, b in module.named_buffers(remove_duplicate=False):
        module_tensors.setdefault(id(b), ("buffer", name))

    torch._dynamo.reset()
    try:
        compiled = torch.compile(module, backend=backend, dynamic=False, fullgraph=False)
        with torch.no_grad():
            final_result = compiled(*example_inputs)
    finally:
        torch._dynamo.reset()
    if not calls:
        raise CaptureError("dynamo captured no graph (the forward has no tensor operations)")

    writer = GraphWriter()
    by_tensor: dict[int, str] = {}
    argument_names = _forward_argument_names(module, len(example_inputs))
    user_input_index = {id(t): i for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)}
    user_inputs: dict[int, str] = {}

    def define(node: torch.fx.Node, tensor: Any, call_index: int) -> None:
        if not isinstance(tensor, torch.Tensor):
            writer.add_placeholder(node, "input")
            return
        if id(tensor) in by_tensor:
            writer.bind(node, by_tensor[id(tensor)])
            return
        if id(tensor) in module_tensors:
            kind, qualified = module_tensors[id(tensor)]
            vid = ("p_" if kind == "parameter" else "b_") + qualified.replace(".", "_")
            writer.add_placeholder(node, kind, qualified,
                                   scalar_of(tensor) if kind == "buffer" else None, vid)
        elif id(tensor) in user_input_index:
            index = user_input_index[id(tensor)]
            writer.add_placeholder(node, "input", value_id=argument_names[index])
            user_inputs[index] = writer.node_values[node]
        else:
            writer.add_placeholder(node, "constant", f"<subgraph call {call_index}: {node.name}>",
                                   scalar_of(tensor))
        if isinstance(writer.node_values.get(node), str):
            by_tensor[id(tensor)] = writer.node_values[node]

    for call_index, (aten, args, result) in enumerate(calls):
        writer.id_prefix = "" if len(calls) == 1 else f"g{call_index}_"
        placeholders = [n for n in aten.graph.nodes if n.op == "placeholder"]
        for node, arg in zip(placeholders, args):
            define(node, arg, call_index)
        for node in aten.graph.nodes:
            if node.op == "get_attr":
                attribute = _attribute(aten, node.target)
                if isinstance(attribute, torch.fx.GraphModule):
                    writer.add_get_attr(node, aten)
                else:
                    define(node, attribute, call_index)
            elif node.op == "call_function":
                writer.add_call(node)
        for out_node, tensor in zip(flat_output_nodes(aten.graph), torch.utils._pytree.tree_leaves(result)):
            bound = writer.node_values.get(out_node) if isinstance(out_node, torch.fx.Node) else None
            if isinstance(bound, str) and isinstance(tensor, torch.Tensor):
                by_tensor.setdefault(id(tensor), bound)
    outputs = [by_tensor[id(t)] for t in torch.utils._pytree.tree_leaves(final_result)
               if isinstance(t, torch.Tensor) and id(t) in by_tensor]
    inputs = [user_inputs[i] for i in sorted(user_inputs)]
    return writer, inputs, outputs, len(calls)


def _record_state(source: dict, writes: module_state.ForwardWrites) -> None:
    """The state the forward writes, in the document's source: the plain tensor attributes
    exported as buffers, and the state the graph cannot keep (fact.compose declines then)."""
    if writes.attributes:
        source["state_attributes"] = writes.attributes
    if writes.not_kept:
        source["state_not_kept"] = writes.not_kept


# --------------------------------------------------------------------------------------------
# Public API


@contextlib.contextmanager
def _quiet_symbolic_shape_warnings():
    """Data-dependent code makes torch log whole graphs as warnings; the failure is recorded in
    source.export_error instead."""
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def capture(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
            path: str | Path | None = None) -> dict:
    """Captures `module(*example_inputs)` as a graph JSON document (docs/graph_json.md).

    Works with modules and inputs on cpu, cuda or meta. Returns the document; when `path` is
    given, also writes it there. Tries torch.export (non-strict) first; if that fails, warns and
    falls back to TorchDynamo, recording the failure in source.export_error. Raises
    CaptureError when neither works.
    """
    return capture_exported(module, example_inputs, path)[0]


def capture_exported(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
                     path: str | Path | None = None, dynamic_shapes: Any = None
                     ) -> tuple[dict, torch.export.ExportedProgram | None]:
    """`capture`, also returning the torch.export program the document was written from (None
    when the capture fell back to TorchDynamo): the graph the plan names, node for node, for
    fact.compose.apply_plan(..., exported=) to rewrite without exporting the module again.

    `dynamic_shapes` (torch.export's structure, with torch.export.Dim or
    fact.dynamic_ranges.Range values) declares dynamic dimensions: the program is exported with
    them, the document gets top-level "symbols" and writes symbolic sizes as expressions over
    their names (docs/dynamic_shapes.md). There is no dynamo fallback then: an export failure
    is a CaptureError. ValueError for a malformed declaration."""
    ep = None
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if dynamic_shapes is not None:
        return _capture_dynamic(module, example_inputs, path, dynamic_shapes)
    source: dict[str, Any] = {
        "module": type(module).__name__,
        "capture": "torch.export",
        "export_error": None,
        "torch": torch.__version__.split("+")[0],
    }
    export_stderr = io.StringIO()  # on failure torch prints the partial graph there
    try:
        with _quiet_symbolic_shape_warnings(), contextlib.redirect_stderr(export_stderr):
            ep, writes = module_state.export_keeping_state(module, example_inputs, strict=False)
    except Exception as export_error:  # noqa: BLE001 - any failure triggers the fallback
        message = f"{type(export_error).__name__}: {export_error}".strip()
        warnings.warn(f"torch.export failed for {type(module).__name__}; falling back to "
                      f"dynamo. Export error: {message.splitlines()[0]}", stacklevel=2)
        source["capture"] = "dynamo"
        source["export_error"] = message
        try:
            with _quiet_symbolic_shape_warnings():
                writer, inputs, outputs, count = _capture_with_dynamo(module, example_inputs)
        except Exception as dynamo_error:
            from fact.model_file import where_raised
            where = where_raised(export_error) or where_raised(dynamo_error)
            raise CaptureError(f"cannot capture {type(module).__name__}: torch.export failed "
                               f"({message.splitlines()[0]}) and the dynamo fallback failed "
                               f"({type(dynamo_error).__name__}: {dynamo_error})"
                               + (f"; the forward raised{where}" if where else "")) from dynamo_error
        source["subgraph_calls"] = count
    else:
        sys.stderr.write(export_stderr.getvalue())
        writer, inputs, outputs, mutations = _from_exported_program(ep)
        if mutations:
            source["buffer_mutations"] = mutations
        _record_state(source, writes)
    doc = {
        "schema": SCHEMA,
        "source": source,
        "values": writer.values,
        "nodes": writer.nodes,
        "inputs": inputs,
        "outputs": outputs,
    }
    if path is not None:
        write_graph(doc, path)
    return doc, ep


def _capture_dynamic(module: torch.nn.Module, example_inputs: tuple, path: str | Path | None,
                     dynamic_shapes: Any) -> tuple[dict, torch.export.ExportedProgram]:
    """capture_exported with declared dynamic dimensions (no dynamo fallback)."""
    from fact.dynamic_ranges import export_dynamic_shapes

    export_shapes, declared = export_dynamic_shapes(dynamic_shapes, module, example_inputs)
    export_stderr = io.StringIO()
    try:
        with _quiet_symbolic_shape_warnings(), contextlib.redirect_stderr(export_stderr):
            ep, writes = _export_over_ranges(module, example_inputs, export_shapes, declared)
    except Exception as error:  # noqa: BLE001 - reported with the declaration
        first = (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]
        raise CaptureError(f"cannot export {type(module).__name__} with the declared dynamic "
                           f"dimensions: {first}") from error
    names, symbols = declared_symbols(ep, declared, example_inputs)
    writer, inputs, outputs, mutations = _from_exported_program(ep, names)
    source: dict[str, Any] = {"module": type(module).__name__, "capture": "torch.export",
                              "export_error": None, "torch": torch.__version__.split("+")[0]}
    if mutations:
        source["buffer_mutations"] = mutations
    _record_state(source, writes)
    doc = {"schema": SCHEMA, "source": source, "symbols": symbols, "values": writer.values,
           "nodes": writer.nodes, "inputs": inputs, "outputs": outputs}
    if path is not None:
        write_graph(doc, path)
    return doc, ep
