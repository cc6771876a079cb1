"""`fact.optimize(module, example_inputs, precision=...)`: the module with its GEMM-family
subgraphs replaced by `fact::gemm` calls (docs/compose.md).

Plan: export the module (torch.export, non-strict), capture it as graph JSON, run the engine's
discovery (`fact discover --json`) and realization (`fact realize`, compiled when the inputs are
on a GPU), then rewrite the exported program's FX graph: each accepted GEMM-family match's nodes
are replaced by one `fact::gemm` call per GEMM of the match; every other node stays PyTorch.
On the CPU the reference implementation of `fact::gemm` stands in for the kernels.

The result is a `ComposedModule`: it runs the rewritten graph for inputs with the shapes,
dtypes, devices and strides it was planned for, and the original module (with a one-line
warning, once per signature) for anything else. Whatever cannot be composed is left to PyTorch
and listed, with the reason, in `.fact_report`; optimize never raises for a module that runs.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.fx

from fact import kernels
from fact import ops  # noqa: F401  (registers fact::gemm)
from fact._engine import EngineNotFound, run_engine
from fact.graph_capture import capture

PRECISIONS = ("strict", "tf32", "native")
GEMM_FAMILY_PATTERNS = ("gemm", "mlp", "swiglu")


@dataclass
class LeftToPyTorch:
    what: str    # a match ("mlp_gelu_tanh at linear_2..add_3") or "module"
    reason: str


@dataclass
class ComposedGemm:
    match: str             # rule of the match
    nodes: list[str]       # captured nodes it replaced (the whole match)
    fusion: str            # the GEMM's fusion name
    shape: str             # problem shape string
    implementation: str    # "kernel <name>" or "reference (CPU)"
    kernel_status: str = ""  # realize's verdict for this GEMM on a GPU


@dataclass
class FactReport:
    precision: str
    device: str
    capture: str = ""
    composed: list[ComposedGemm] = field(default_factory=list)
    left_to_pytorch: list[LeftToPyTorch] = field(default_factory=list)
    work_dir: str = ""

    def leave(self, what: str, reason: str) -> None:
        self.left_to_pytorch.append(LeftToPyTorch(what, reason))

    def to_json(self) -> dict:
        return {
            "precision": self.precision,
            "device": self.device,
            "capture": self.capture,
            "work_dir": self.work_dir,
            "composed": [vars(c) for c in self.composed],
            "left_to_pytorch": [vars(l) for l in self.left_to_pytorch],
        }

    def __str__(self) -> str:
        lines = [f"FACT composition ({self.precision}, {self.device}): "
                 f"{len(self.composed)} GEMM(s) composed, "
                 f"{len(self.left_to_pytorch)} item(s) left to PyTorch"]
        for c in self.composed:
            lines.append(f"  composed {c.match}: {c.fusion} {c.shape} -> {c.implementation}")
        for item in self.left_to_pytorch:
            lines.append(f"  left to PyTorch: {item.what}: {item.reason}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Guards


def _signature(args: Sequence[Any]) -> tuple:
    """What the composed graph assumes about its inputs: shape, dtype, device, strides and
    16-byte alignment of every tensor; the value of everything else."""
    parts = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            parts.append(("tensor", tuple(arg.shape), arg.dtype, str(arg.device), arg.stride(),
                          _aligned(arg)))
        else:
            parts.append(("value", repr(arg)))
    return tuple(parts)


def _aligned(t: torch.Tensor) -> bool:
    if t.device.type != "cuda":
        return True
    try:
        return t.data_ptr() % 16 == 0
    except RuntimeError:  # fake tensors have no data
        return True


def _describe(signature: tuple) -> str:
    words = []
    for part in signature:
        if part[0] == "tensor":
            words.append(f"{part[2]}{list(part[1])}@{part[3]} strides {part[4]}"
                         + ("" if part[5] else " unaligned"))
        else:
            words.append(part[1])
    return "(" + ", ".join(words) + ")"


class ComposedModule(torch.nn.Module):
    """The optimized module. `graph_module` is the rewritten exported graph (None when nothing
    was composed), `original` the module it came from, `fact_report` what was done and why."""

    def __init__(self, original: torch.nn.Module, graph_module: torch.fx.GraphModule | None,
                 signature: tuple | None, report: FactReport):
        super().__init__()
        self.original = original
        self.graph_module = graph_module
        self.planned_signature = signature
        self.fact_report = report
        self._warned: set = set()

    def forward(self, *args, **kwargs):
        if self.graph_module is None:
            return self.original(*args, **kwargs)
        signature = _signature(args)
        if kwargs or signature != self.planned_signature:
            if signature not in self._warned:
                self._warned.add(signature)
                warnings.warn(f"fact: inputs {_describe(signature)} differ from the planned "
                              f"{_describe(self.planned_signature)}; running the original module "
                              f"for them", stacklevel=2)
            return self.original(*args, **kwargs)
        return self.graph_module(*args)


# --------------------------------------------------------------------------------------------
# Planning


def _match_label(match: dict) -> str:
    nodes = match.get("nodes", [])
    span = nodes[0] if len(nodes) == 1 else f"{nodes[0]}..{nodes[-1]}" if nodes else "?"
    return f"{match.get('rule', '?')} at {span}"


def _fold_epilogue(problem: dict) -> tuple[float, float, float, float, str, list[str]]:
    """(alpha, beta, act_p0, act_p1, epilogue string, operand value ids [bias, c]) of a
    GemmProblem JSON; a leading scale step is folded into alpha."""
    alpha = float(problem.get("alpha", 1.0))
    beta, p0, p1 = 1.0, 0.0, 0.0
    steps = list(problem.get("epilogue", []))
    if steps and steps[0].get("kind") == "scale":
        alpha *= float(steps[0].get("value", 1.0))
        steps = steps[1:]
    words, bias, c = [], "", ""
    for step in steps:
        kind = step.get("kind")
        if kind == "scale":
            words.append(f"scale:{float(step.get('value', 1.0))!r}")
        elif kind == "bias":
            words.append("bias")
            bias = step.get("operand", "")
        elif kind in ("activation", "act"):
            words.append(f"act:{step.get('activation')}")
            p0, p1 = float(step.get("p0", 0.0)), float(step.get("p1", 0.0))
        elif kind == "residual":
            words.append("residual")
            beta = float(step.get("value", 1.0))
            c = step.get("operand", "")
        elif kind == "multiply":
            words.append("multiply")
            c = step.get("operand", "")
        else:
            raise ValueError(f"unknown epilogue step kind '{kind}'")
    return alpha, beta, p0, p1, ",".join(words), [bias, c]


def _gpu_limit(problem: dict) -> str:
    """Why the C ABI cannot carry this problem to a kernel (docs/runtime.md), or ''."""
    steps = problem.get("epilogue", [])
    kinds = [s.get("kind") for s in steps]
    if "scale" in kinds[1:]:
        return "a scale step after the first epilogue step"
    if "residual" in kinds and "multiply" in kinds:
        return "residual and multiply together (one C pointer)"
    return ""


def _value_nodes(graph_module: torch.fx.GraphModule, doc: dict) -> dict[str, torch.fx.Node]:
    """Graph JSON value id -> node of the unlifted exported module."""
    by_name = {node.name: node for node in graph_module.graph.nodes}
    by_target = {node.target: node for node in graph_module.graph.nodes if node.op == "get_attr"}
    nodes: dict[str, torch.fx.Node] = {}
    for value in doc["values"]:
        vid = value["id"]
        if value.get("kind") in ("parameter", "buffer", "constant") and value.get("target") in by_target:
            nodes[vid] = by_target[value["target"]]
        elif vid in by_name:
            nodes[vid] = by_name[vid]
    return nodes


def _rewrite_match(graph: torch.fx.Graph, match: dict, values: dict[str, torch.fx.Node],
                   handles: list[int], kernel_ids: list[str]) -> str:
    """Replaces one match's nodes with fact::gemm calls; returns '' or why it was not done
    (the graph is unchanged then)."""
    plans = []
    produced: set[str] = set()
    for problem in match["gemms"]:
        alpha, beta, p0, p1, epilogue, (bias, c) = _fold_epilogue(problem)
        needed = [problem["a"]["value"], problem["b"]["value"]] + [v for v in (bias, c) if v]
        missing = [v for v in needed if v not in values and v not in produced]
        d = problem["d"]["value"]
        if missing or d not in values:
            return f"values not found in the exported graph: {', '.join(missing or [d])}"
        d_node = values[d]
        val = d_node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return f"no tensor metadata for {d}"
        d_operand = problem["d"]
        m, n = int(problem["m"]), int(problem["n"])
        batch = int(problem.get("batch", 1))
        if d_operand.get("layout", "row") != "row" or int(d_operand.get("ld", n)) != n \
                or val.numel() != batch * m * n or not val.is_contiguous():
            return f"output {d} is not a dense row-major M×N tensor"
        plans.append((problem, alpha, beta, p0, p1, epilogue, bias, c, d_node, val))
        produced.add(d)

    match_nodes = [values[name] for name in match["nodes"] if name in values]
    replacements = {}
    for index, (problem, alpha, beta, p0, p1, epilogue, bias, c, d_node, val) in enumerate(plans):
        def node_of(vid):
            return replacements.get(vid) or values[vid]

        a, b = problem["a"], problem["b"]
        geometry = {name: [0 if o.get("layout", "row") == "row" else 1, int(o["ld"]),
                           int(o.get("batch_stride", 0))] for name, o in (("a", a), ("b", b))}
        with graph.inserting_after(d_node):
            new = graph.call_function(torch.ops.fact.gemm.default, (
                node_of(a["value"]), node_of(b["value"]),
                node_of(bias) if bias else None, node_of(c) if c else None,
                int(problem["m"]), int(problem["n"]), int(problem["k"]), int(problem.get("batch", 1)),
                geometry["a"], geometry["b"], list(val.shape), val.dtype,
                alpha, beta, p0, p1, epilogue, handles[index], kernel_ids[index]))
        new.meta["val"] = val
        d_node.replace_all_uses_with(new, delete_user_cb=lambda user, new=new: user is not new)
        replacements[problem["d"]["value"]] = new
    for node in reversed(match_nodes):
        if not node.users and node.op == "call_function":
            graph.erase_node(node)
    return ""


# --------------------------------------------------------------------------------------------
# Engine


def _engine_discover(graph_json: Path, out: Path, precision: str) -> dict:
    run_engine("discover", str(graph_json), "--json", str(out), "--precision", precision)
    return json.loads(out.read_text())


def _engine_realize(graph_json: Path, out_dir: Path, precision: str, compile_kernels: bool) -> dict:
    args = ["realize", str(graph_json), "-o", str(out_dir), "--precision", precision]
    if compile_kernels:
        args.append("--compile")
    run_engine(*args)
    return json.loads((out_dir / "manifest.json").read_text())


# --------------------------------------------------------------------------------------------
# Public API


def optimize(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
             precision: str = "strict", *, work_dir: str | Path | None = None) -> ComposedModule:
    """Returns `module` with its GEMM-family subgraphs composed as `fact::gemm` calls (see the
    module docstring). Never raises for a module that runs: what was left to PyTorch, and why,
    is in the result's `.fact_report`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not '{precision}'")
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    report = FactReport(precision=precision, device=str(device))

    def unoptimized(reason: str) -> ComposedModule:
        report.leave("module", reason)
        return ComposedModule(module, None, None, report)

    if device.type == "cpu" and precision == "tf32":
        return unoptimized("precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are on "
                           "the CPU, where only 'strict' and 'native' compose (with the "
                           "reference implementation)")
    if device.type not in ("cpu", "cuda"):
        return unoptimized(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                           f"(reference implementation) only")
    shapes_logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    shapes_level = shapes_logger.level
    export_error = None
    try:
        shapes_logger.setLevel(logging.ERROR)
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = torch.export.export(module, example_inputs, strict=False)
    except Exception as error:  # noqa: BLE001 - any export failure leaves the module as is
        export_error = error
    finally:
        shapes_logger.setLevel(shapes_level)
    if export_error is not None:
        first_line = (f"{type(export_error).__name__}: {export_error}".strip().splitlines() or [""])[0]
        return unoptimized(f"cannot be exported with torch.export ({first_line})")

    folder = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="fact_compose_"))
    folder.mkdir(parents=True, exist_ok=True)
    report.work_dir = str(folder)
    graph_json = folder / "graph.json"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            doc = capture(module, example_inputs, graph_json)
    except Exception as error:  # noqa: BLE001
        return unoptimized(f"capture failed: {type(error).__name__}: {error}")
    report.capture = doc["source"]["capture"]
    if report.capture != "torch.export":
        return unoptimized("the capture fell back to dynamo; composition needs one exported graph")

    on_gpu = device.type == "cuda"
    try:
        discovery = _engine_discover(graph_json, folder / "matches.json", precision)
        manifest = _engine_realize(graph_json, folder / "kernels", precision, compile_kernels=on_gpu)
    except EngineNotFound as error:
        return unoptimized(str(error))
    except RuntimeError as error:
        return unoptimized(f"the engine failed: {str(error).splitlines()[0]}")

    kernels_by_key = {k["key"]: k for k in manifest.get("kernels", [])}
    realized = {(g["match"], g["gemm"]): g for g in manifest.get("gemms", [])}
    graph_module = exported.module()
    values = _value_nodes(graph_module, doc)

    for match_index, match in enumerate(discovery.get("matches", [])):
        label = _match_label(match)
        if match.get("status") != "accepted":
            report.leave(label, f"{match.get('status')}: {match.get('reason', '')}")
            continue
        if match.get("pattern") not in GEMM_FAMILY_PATTERNS or not match.get("gemms"):
            report.leave(label, f"pattern '{match.get('pattern')}' is not composed yet "
                                f"(only the GEMM family: {', '.join(GEMM_FAMILY_PATTERNS)})")
            continue
        handles, kernel_ids, implementations, statuses, refusal = [], [], [], [], ""
        for gemm_index, problem in enumerate(match["gemms"]):
            entry = realized.get((match_index, gemm_index), {})
            kernel = kernels_by_key.get(entry.get("kernel", ""), {})
            if entry.get("error"):
                status = f"no kernel: {entry['error']}"
            elif kernel:
                status = kernel.get("status", "") + (f": {kernel['reason']}" if kernel.get("reason") else "")
            else:
                status = "not in the realize manifest"
            statuses.append(status)
            handle = -1
            if on_gpu:
                limit = _gpu_limit(problem)
                if limit:
                    refusal = f"GEMM {gemm_index} ({problem.get('fusion')}): the kernel ABI cannot express {limit}"
                elif not kernel or kernel.get("status") not in ("built", "cached") or not kernel.get("library"):
                    refusal = f"GEMM {gemm_index} ({problem.get('fusion')}): {status}"
                else:
                    try:
                        handle = kernels.load(kernel["library"])
                    except kernels.KernelLoadError as error:
                        refusal = f"GEMM {gemm_index}: {error}"
                implementations.append(f"kernel {kernel.get('name', '?')}")
            else:
                implementations.append("reference (CPU)")
            handles.append(handle)
            kernel_ids.append(kernel.get("key", ""))
        if refusal:
            report.leave(label, refusal)
            continue
        why_not = _rewrite_match(graph_module.graph, match, values, handles, kernel_ids)
        if why_not:
            report.leave(label, why_not)
            continue
        for problem, implementation, status in zip(match["gemms"], implementations, statuses):
            report.composed.append(ComposedGemm(
                match=match.get("rule", "?"), nodes=list(match["nodes"]),
                fusion=problem.get("fusion", ""), shape=problem.get("shape", ""),
                implementation=implementation, kernel_status=status))

    if not report.composed:
        return ComposedModule(module, None, None, report)
    graph_module.graph.lint()
    graph_module.recompile()
    (folder / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return ComposedModule(module, graph_module, _signature(example_inputs), report)
