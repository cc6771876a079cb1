"""`capture(module, example_inputs)`: a module's forward pass as FACT graph JSON.

Traces with `torch.export.export` (non-strict) and writes the ATen graph it yields. When export
fails, warns, falls back to TorchDynamo (graph breaks allowed: each subgraph is traced to ATen
with make_fx and the pieces are linked by the tensors that pass between them) and records the
export failure in `source.export_error`.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.fx

from fact.graph_writer import SCHEMA, CaptureError, GraphWriter, flat_output_nodes, scalar_of, write_graph


# --------------------------------------------------------------------------------------------
# torch.export path


def _from_exported_program(ep: torch.export.ExportedProgram) -> tuple[GraphWriter, list, list, dict]:
    from torch.export.graph_signature import InputKind, OutputKind

    writer = GraphWriter()
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
            raise CaptureError(f"unsupported get_attr node '{node.name}' in the exported graph")

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


# --------------------------------------------------------------------------------------------
# Dynamo fallback


def _capture_with_dynamo(module: torch.nn.Module, example_inputs: Sequence[Any]) -> tuple[GraphWriter, list, list, int]:
    """Runs the module under torch.compile with a backend that traces every subgraph to ATen
    (make_fx, pre-dispatch), then links the subgraphs by the tensors that pass between them."""
    from torch.fx.experimental.proxy_tensor import make_fx

    import torch._dynamo

    subgraphs: list[dict] = []

    def backend(gm: torch.fx.GraphModule, backend_inputs: list):
        aten = make_fx(gm, tracing_mode="fake", pre_dispatch=True)(*backend_inputs)
        record = {"graph": aten, "calls": []}
        subgraphs.append(record)

        def run(*args):
            result = gm(*args)
            record["calls"].append((list(args), result))
            return result

        return run

    names = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), ("parameter", name))
    for name, b in module.named_buffers(remove_duplicate=False):
        names.setdefault(id(b), ("buffer", name))

    torch._dynamo.reset()
    try:
        compiled = torch.compile(module, backend=backend, dynamic=False, fullgraph=False)
        with torch.no_grad():
            compiled(*example_inputs)
    finally:
        torch._dynamo.reset()
    if not subgraphs:
        raise CaptureError("dynamo captured no graph (the forward has no tensor operations)")

    writer = GraphWriter()
    single = len(subgraphs) == 1
    by_tensor: dict[int, str] = {}
    user_input_ids: dict[int, int] = {id(t): i for i, t in enumerate(example_inputs)
                                      if isinstance(t, torch.Tensor)}
    user_inputs: dict[int, str] = {}
    outputs: list[str] = []
    for index, record in enumerate(subgraphs):
        if not record["calls"]:
            continue
        args, result = record["calls"][0]
        writer.id_prefix = "" if single else f"g{index}_"
        placeholders = [n for n in record["graph"].graph.nodes if n.op == "placeholder"]
        for node, arg in zip(placeholders, args):
            if isinstance(arg, torch.Tensor) and id(arg) in by_tensor:
                writer.bind(node, by_tensor[id(arg)])
                continue
            if isinstance(arg, torch.Tensor) and id(arg) in names:
                kind, qualified = names[id(arg)]
                vid = ("p_" if kind == "parameter" else "b_") + qualified.replace(".", "_")
                if vid in writer.value_ids:
                    writer.bind(node, vid)
                else:
                    writer.add_placeholder(node, kind, qualified,
                                           scalar_of(arg) if kind == "buffer" else None, vid)
            elif isinstance(arg, torch.Tensor) and id(arg) in user_input_ids:
                writer.add_placeholder(node, "input", value_id=f"arg{user_input_ids[id(arg)]}"
                                       if not single else None)
                user_inputs[user_input_ids[id(arg)]] = writer.node_values[node]
            elif isinstance(arg, torch.Tensor):
                writer.add_placeholder(node, "constant", f"<subgraph {index} input {node.name}>",
                                       scalar_of(arg))
            else:
                writer.add_placeholder(node, "input")
            if isinstance(arg, torch.Tensor) and isinstance(writer.node_values.get(node), str):
                by_tensor[id(arg)] = writer.node_values[node]
        for node in record["graph"].graph.nodes:
            if node.op == "call_function":
                writer.add_call(node)
        out_nodes = flat_output_nodes(record["graph"].graph)
        results = torch.utils._pytree.tree_leaves(result)
        subgraph_outputs = []
        for out_node, tensor in zip(out_nodes, results):
            bound = writer.node_values.get(out_node) if isinstance(out_node, torch.fx.Node) else None
            if isinstance(bound, str):
                subgraph_outputs.append(bound)
                if isinstance(tensor, torch.Tensor):
                    by_tensor[id(tensor)] = bound
        if index == len(subgraphs) - 1 or single:
            outputs = subgraph_outputs
    inputs = [user_inputs[i] for i in sorted(user_inputs)]
    return writer, inputs, outputs, len(subgraphs)


# --------------------------------------------------------------------------------------------
# Public API


def capture(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
            path: str | Path | None = None) -> dict:
    """Captures `module(*example_inputs)` as a graph JSON document (docs/graph_json.md).

    Works with modules and inputs on cpu, cuda or meta. Returns the document; when `path` is
    given, also writes it there. Tries torch.export (non-strict) first; if that fails, warns and
    falls back to TorchDynamo, recording the failure in source.export_error. Raises
    CaptureError when neither works.
    """
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    source: dict[str, Any] = {
        "module": type(module).__name__,
        "capture": "torch.export",
        "export_error": None,
        "torch": torch.__version__.split("+")[0],
    }
    try:
        ep = torch.export.export(module, example_inputs, strict=False)
    except Exception as export_error:  # noqa: BLE001 - any failure triggers the fallback
        message = f"{type(export_error).__name__}: {export_error}".strip()
        warnings.warn(f"torch.export failed for {type(module).__name__}; falling back to "
                      f"dynamo. Export error: {message.splitlines()[0]}", stacklevel=2)
        source["capture"] = "dynamo"
        source["export_error"] = message
        try:
            writer, inputs, outputs, count = _capture_with_dynamo(module, example_inputs)
        except Exception as dynamo_error:
            raise CaptureError(f"cannot capture {type(module).__name__}: torch.export failed "
                               f"({message.splitlines()[0]}) and the dynamo fallback failed "
                               f"({type(dynamo_error).__name__}: {dynamo_error})") from dynamo_error
        source["subgraphs"] = count
    else:
        writer, inputs, outputs, mutations = _from_exported_program(ep)
        if mutations:
            source["buffer_mutations"] = mutations
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
    return doc
