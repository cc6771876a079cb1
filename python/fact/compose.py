"""`fact.optimize(module, example_inputs, precision=...)`: the module with its GEMM-family
subgraphs replaced by `fact::gemm` calls (docs/compose.md).

Two halves, so a saved plan can be applied again without the engine:

- `plan(...)` (needs the engine): capture the module as graph JSON, run the engine's discovery
  (`fact discover --json`), optionally tune every GEMM (`fact tune`, stored in the tuning
  database), then realization (`fact realize`, compiled when asked or when the inputs are on a
  GPU; it takes the tuning database's choices). Writes `plan.json` into the work folder.
- `apply_plan(...)` (pure Python): export the module, rewrite the exported program's FX graph
  (each accepted, selected GEMM-family match's nodes become one `fact::gemm` call per GEMM;
  every other node stays PyTorch), load the kernel libraries, verify each composed GEMM on the
  GPU against float64, compile the PyTorch remainder with Inductor (or run it eagerly), and
  optionally capture the whole forward into a CUDA graph.

`optimize` is `plan` followed by `apply_plan`. The result is a `ComposedModule`: it runs the
composed graph for inputs with the shapes, dtypes, devices and strides it was planned for, and
the original module (with a one-line warning, once per signature) for anything else. Whatever
cannot be composed is left to PyTorch and listed, with the reason, in `.fact_report`;
optimize never raises for a module that runs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.fx

from fact import kernels
from fact import ops  # noqa: F401  (registers fact::gemm)
from fact._engine import EngineNotFound, run_engine
from fact.graph_capture import capture
from fact.graph_writer import CaptureError

PRECISIONS = ("strict", "tf32", "native")
REMAINDERS = ("inductor", "eager")
GEMM_FAMILY_PATTERNS = ("gemm", "mlp", "swiglu")
PLAN_SCHEMA = "fact.plan/1"
PLAN_FILE = "plan.json"

def _manifest_tolerance(entry: dict) -> float | None:
    """The precision contract's bound ||out - ref|| / ||ref|| for one realized GEMM, as the engine
    wrote it into the realize manifest (include/fact/runtime/precision.hpp); None if absent."""
    value = entry.get("tolerance")
    return float(value) if value is not None else None


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
    config: str = ""         # the kernel configuration realize chose
    config_source: str = ""  # "database" / "bucket" (tuned choice) or "default"
    tune_seconds: float | None = None  # time `fact tune` spent on this GEMM (tune > 0)
    rel_err: float | None = None       # verification on the GPU against float64
    tolerance: float | None = None     # the precision contract's bound for rel_err


@dataclass
class FactReport:
    precision: str
    device: str
    capture: str = ""
    composed: list[ComposedGemm] = field(default_factory=list)
    left_to_pytorch: list[LeftToPyTorch] = field(default_factory=list)
    work_dir: str = ""
    remainder: str = "eager"        # how the PyTorch remainder runs, with a fallback's reason
    cuda_graphs: str = "off"        # "on" or "off", with the reason when asked for but off
    op_implementation: str = ""     # which implementation of fact::gemm runs
    notes: list[str] = field(default_factory=list)

    def leave(self, what: str, reason: str) -> None:
        self.left_to_pytorch.append(LeftToPyTorch(what, reason))

    def to_json(self) -> dict:
        return {
            "precision": self.precision,
            "device": self.device,
            "capture": self.capture,
            "work_dir": self.work_dir,
            "remainder": self.remainder,
            "cuda_graphs": self.cuda_graphs,
            "op_implementation": self.op_implementation,
            "composed": [vars(c) for c in self.composed],
            "left_to_pytorch": [vars(l) for l in self.left_to_pytorch],
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        lines = [f"FACT composition ({self.precision}, {self.device}): "
                 f"{len(self.composed)} GEMM(s) composed, "
                 f"{len(self.left_to_pytorch)} item(s) left to PyTorch; remainder {self.remainder}, "
                 f"CUDA graphs {self.cuda_graphs}"
                 + (f"; fact::gemm: {self.op_implementation}" if self.op_implementation else "")]
        for c in self.composed:
            extra = []
            if c.config:
                extra.append(f"config {c.config} ({c.config_source})")
            if c.tune_seconds is not None:
                extra.append(f"tuned {c.tune_seconds:.1f} s")
            if c.rel_err is not None:
                extra.append(f"rel_err {c.rel_err:.2e} (tol {c.tolerance:.0e})")
            lines.append(f"  composed {c.match}: {c.fusion} {c.shape} -> {c.implementation}"
                         + (f" [{', '.join(extra)}]" if extra else ""))
        for item in self.left_to_pytorch:
            lines.append(f"  left to PyTorch: {item.what}: {item.reason}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Guards


def _signature(args: Sequence[Any]) -> tuple:
    """What the composed graph assumes about its inputs: shape, dtype, device, strides and
    16-byte alignment of every tensor; the value of everything else."""
    parts = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            parts.append(("tensor", tuple(arg.shape), arg.dtype, arg.device, arg.stride(),
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


def _first_line(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]


class _CudaGraphRunner:
    """`fn` captured into a torch.cuda.CUDAGraph for one input signature: each call copies its
    tensors into the static input buffers, replays, and returns copies of the static outputs
    (so a later call never overwrites a result the caller kept)."""

    def __init__(self, fn: Callable, example_args: Sequence[Any], warmup_calls: int = 3):
        self.static_args = [_static_like(a) for a in example_args]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(warmup_calls):
                fn(*self.static_args)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.static_output = fn(*self.static_args)
        torch.cuda.synchronize()

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


class ComposedModule(torch.nn.Module):
    """The optimized module. `graph_module` is the rewritten exported graph (None when nothing
    was composed), `original` the module it came from, `fact_report` what was done and why.
    The planned signature runs through the compiled remainder (Inductor) or the CUDA graph when
    those are on, else `graph_module` eagerly."""

    def __init__(self, original: torch.nn.Module, graph_module: torch.fx.GraphModule | None,
                 signature: tuple | None, report: FactReport):
        super().__init__()
        self.original = original
        self.graph_module = graph_module
        self.planned_signature = signature
        self.fact_report = report
        self._warned: set = set()
        # Not submodules (their parameters are graph_module's): kept out of state_dict.
        self.__dict__["_compiled"] = None
        self.__dict__["_cuda_graph"] = None

    def _run_planned(self, args: tuple):
        if self._cuda_graph is not None:
            return self._cuda_graph(args)
        if self._compiled is not None:
            try:
                return self._compiled(*args)
            except Exception as error:  # noqa: BLE001 - Inductor trouble: eager from now on
                self.__dict__["_compiled"] = None
                self.fact_report.remainder = f"eager (Inductor failed at a call: {_first_line(error)})"
                warnings.warn(f"fact: the Inductor-compiled remainder failed "
                              f"({_first_line(error)}); running it eagerly from now on",
                              stacklevel=3)
        # forward, not __call__: the exported module's pre-hooks re-check what the signature
        # guard above has already checked (pytree spec, input constraints) on every call.
        return self.graph_module.forward(*args)

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
        return self._run_planned(args)


# --------------------------------------------------------------------------------------------
# Rewriting


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


def _value_nodes(graph_module: torch.fx.GraphModule, values_doc: list[dict]) -> dict[str, torch.fx.Node]:
    """Graph JSON value id -> node of the unlifted exported module."""
    by_name = {node.name: node for node in graph_module.graph.nodes}
    by_target = {node.target: node for node in graph_module.graph.nodes if node.op == "get_attr"}
    nodes: dict[str, torch.fx.Node] = {}
    for value in values_doc:
        vid = value["id"]
        if value.get("kind") in ("parameter", "buffer", "constant") and value.get("target") in by_target:
            nodes[vid] = by_target[value["target"]]
        elif vid in by_name:
            nodes[vid] = by_name[vid]
    return nodes


@dataclass
class GemmCall:
    """One fact::gemm call of a match: its operands (graph JSON value ids) and arguments."""
    problem: dict
    a: str
    b: str
    bias: str
    c: str
    d: str
    d_node: torch.fx.Node
    out: torch.Tensor            # D's metadata (shape, dtype) in the exported graph
    alpha: float
    beta: float
    act_p0: float
    act_p1: float
    epilogue: str
    a_geometry: list[int]
    b_geometry: list[int]
    handle: int = -1
    kernel_id: str = ""

    def scalar_args(self) -> tuple:
        p = self.problem
        return (int(p["m"]), int(p["n"]), int(p["k"]), int(p.get("batch", 1)),
                self.a_geometry, self.b_geometry, list(self.out.shape), self.out.dtype,
                self.alpha, self.beta, self.act_p0, self.act_p1, self.epilogue)


def _plan_calls(match: dict, values: dict[str, torch.fx.Node]) -> tuple[list[GemmCall], str]:
    """The match's fact::gemm calls, or ([], why they cannot be made)."""
    calls = []
    produced: set[str] = set()
    for problem in match["gemms"]:
        alpha, beta, p0, p1, epilogue, (bias, c) = _fold_epilogue(problem)
        needed = [problem["a"]["value"], problem["b"]["value"]] + [v for v in (bias, c) if v]
        missing = [v for v in needed if v not in values and v not in produced]
        d = problem["d"]["value"]
        if missing or d not in values:
            return [], f"values not found in the exported graph: {', '.join(missing or [d])}"
        d_node = values[d]
        val = d_node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return [], f"no tensor metadata for {d}"
        d_operand = problem["d"]
        m, n = int(problem["m"]), int(problem["n"])
        batch = int(problem.get("batch", 1))
        if d_operand.get("layout", "row") != "row" or int(d_operand.get("ld", n)) != n \
                or val.numel() != batch * m * n or not val.is_contiguous():
            return [], f"output {d} is not a dense row-major M×N tensor"
        geometry = {name: [0 if o.get("layout", "row") == "row" else 1, int(o["ld"]),
                           int(o.get("batch_stride", 0))]
                    for name, o in (("a", problem["a"]), ("b", problem["b"]))}
        calls.append(GemmCall(problem, problem["a"]["value"], problem["b"]["value"], bias, c, d,
                              d_node, val, alpha, beta, p0, p1, epilogue, geometry["a"],
                              geometry["b"]))
        produced.add(d)
    return calls, ""


def _insert_calls(graph: torch.fx.Graph, match: dict, values: dict[str, torch.fx.Node],
                  calls: list[GemmCall]) -> None:
    """Replaces the match's nodes with its calls (each inserted right after the node producing
    its D; uses of D are redirected, then match nodes left without users are erased)."""
    match_nodes = [values[name] for name in match["nodes"] if name in values]
    replacements: dict[str, torch.fx.Node] = {}

    def node_of(vid):
        return replacements.get(vid) or values[vid]

    for call in calls:
        # fact::gemm_planned carries the 15 non-tensor arguments as one registered plan: the
        # per-call cost of passing them through the dispatcher is most of the op's CPU time.
        plan = ops.plan_gemm(*call.scalar_args(), call.handle, call.kernel_id)
        with graph.inserting_after(call.d_node):
            new = graph.call_function(torch.ops.fact.gemm_planned.default, (
                node_of(call.a), node_of(call.b),
                node_of(call.bias) if call.bias else None, node_of(call.c) if call.c else None,
                plan))
        new.meta["val"] = call.out
        call.d_node.replace_all_uses_with(new, delete_user_cb=lambda user, new=new: user is not new)
        replacements[call.d] = new
    for node in reversed(match_nodes):
        if not node.users and node.op == "call_function":
            graph.erase_node(node)


# --------------------------------------------------------------------------------------------
# Verification (GPU)


def _random_like(meta: torch.Tensor, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """Fresh normal values with `meta`'s shape, strides and dtype (any strides: the values come
    from a dense base long enough for every addressed element)."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(meta.shape, meta.stride()) if size > 0)
    base = torch.randn(max(extent, 1), generator=generator, dtype=torch.float32)
    return base.to(device=device, dtype=meta.dtype).as_strided(tuple(meta.shape), meta.stride())


def _verify_call(call: GemmCall, values: dict[str, torch.fx.Node], precision: str,
                 tolerance: float, device: torch.device, seed: int) -> tuple[float | None, float, str]:
    """Runs the call's kernel on fresh random operands of the planned shapes and compares with
    fact.ops.reference_gemm in float64: (rel_err, tolerance, '' or why it fails)."""
    generator = torch.Generator().manual_seed(seed)

    def operand(vid):
        meta = values[vid].meta.get("val")
        if not isinstance(meta, torch.Tensor):
            raise ValueError(f"no tensor metadata for operand {vid}")
        return _random_like(meta, device, generator)

    try:
        a, b = operand(call.a), operand(call.b)
        bias = operand(call.bias) if call.bias else None
        c = operand(call.c) if call.c else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.ops.fact.gemm.default(a, b, bias, c, *call.scalar_args(), call.handle,
                                              call.kernel_id)
            torch.cuda.synchronize(device)
        refused = [w for w in caught if "cannot implement" in str(w.message)]
        if refused:
            return None, tolerance, f"the kernel cannot implement the planned problem ({refused[0].message})"
        reference = ops.reference_gemm(a, b, bias, c, *call.scalar_args()[:7], torch.float64,
                                       *call.scalar_args()[8:])
    except Exception as error:  # noqa: BLE001 - a kernel that errors fails verification
        return None, tolerance, f"verification run failed: {_first_line(error)}"
    got = out.to(torch.float64)
    if not torch.isfinite(got).all():
        return None, tolerance, "the kernel wrote non-finite values"
    reference_norm = torch.linalg.vector_norm(reference).item()
    difference = torch.linalg.vector_norm(got - reference).item()
    rel_err = difference / reference_norm if reference_norm > 0 else difference
    if not rel_err <= tolerance:
        return rel_err, tolerance, (f"verification failed: relative error {rel_err:.3e} above the "
                                    f"{precision} tolerance {tolerance:.0e}")
    return rel_err, tolerance, ""


def op_implementation(device_type: str) -> str:
    """Which implementation of fact::gemm runs for tensors on `device_type`."""
    if device_type != "cuda":
        return "reference (float64 torch ops)"
    if importlib.util.find_spec("fact.native") is None:
        return "kernel libraries through ctypes (fact.kernels)"
    try:
        from fact import native  # noqa: PLC0415 - optional C++ extension
        return str(native.describe())
    except Exception as error:  # noqa: BLE001 - an unusable extension is reported, not fatal
        return f"kernel libraries (fact.native unavailable: {_first_line(error)})"


# --------------------------------------------------------------------------------------------
# Planning (engine)


def _normalize_inputs(example_inputs: Sequence[Any] | Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    return tuple(example_inputs)


def _device_of(example_inputs: tuple) -> torch.device:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return tensors[0].device if tensors else torch.device("cpu")


def _input_specs(example_inputs: tuple) -> list[dict]:
    return [{"shape": list(x.shape), "dtype": str(x.dtype)} if isinstance(x, torch.Tensor)
            else {"value": repr(x)} for x in example_inputs]


def _normalize_patterns(patterns: Iterable[str] | str | None) -> list[str] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        return [patterns]
    return sorted(set(patterns))


def _selected(match: dict, patterns: list[str] | None) -> bool:
    return patterns is None or match.get("rule") in patterns or match.get("pattern") in patterns


_TUNE_LABEL = re.compile(r"^match (\d+) \S+(?: gemm (\d+))? ")


def _engine_tune(graph_json: Path, out_dir: Path, precision: str, max_candidates: int) -> dict:
    """`fact tune` over every accepted GEMM of the graph (the choices go to the tuning
    database); returns {"<match>:<gemm>": {"seconds", "config", "origin", "error"}}."""
    started = time.monotonic()
    proc = run_engine("tune", str(graph_json), "--precision", precision, "--max-candidates",
                      str(max_candidates), "--baselines", "none", "--no-progress", "-o",
                      str(out_dir), check=False)
    summary_file = out_dir / "tune-summary.json"
    if not summary_file.is_file():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"fact tune wrote no summary (exit {proc.returncode}): {tail[0]}")
    tuning = {}
    for entry in json.loads(summary_file.read_text()):
        found = _TUNE_LABEL.match(entry.get("label", ""))
        if not found:
            continue
        key = f"{found.group(1)}:{found.group(2) or 0}"
        best = entry.get("best") or {}
        tuning[key] = {"seconds": entry.get("seconds"), "config": best.get("config", ""),
                       "origin": entry.get("origin", ""), "error": entry.get("error", "")
                       or ("" if best else "; ".join(entry.get("notes", [])) or "no configuration verified")}
    tuning["_total_seconds"] = time.monotonic() - started
    return tuning


def plan(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, precision: str = "strict",
         *, work_dir: str | Path | None = None, patterns: Iterable[str] | str | None = None,
         tune: int = 0, compile_kernels: bool | None = None) -> Path:
    """Plans the composition of `module` for `example_inputs` with the engine and writes
    `<work_dir>/plan.json` (returns work_dir; a fresh temporary folder when None).

    plan.json: schema, precision, device (of the inputs), inputs (shapes, dtypes), status
    ("planned", or "unplanned" with the reason), capture, values (graph JSON value ids, kinds,
    parameter targets), matches (discovery), manifest (realize), kernels ({key: library path}),
    tuning ({"<match>:<gemm>": seconds, config, origin, error}), compiled, patterns, notes.
    `compile_kernels` None compiles when the inputs are on a GPU; `tune` > 0 tunes each GEMM over
    at most that many configurations first (GPU only). Raises ValueError for an unknown
    precision; everything else that goes wrong is recorded as the plan's reason."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not '{precision}'")
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    folder = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="fact_compose_"))
    folder.mkdir(parents=True, exist_ok=True)
    selected = _normalize_patterns(patterns)
    compile_kernels = device.type == "cuda" if compile_kernels is None else bool(compile_kernels)
    doc: dict[str, Any] = {
        "schema": PLAN_SCHEMA, "precision": precision, "device": device.type,
        "inputs": _input_specs(example_inputs), "status": "unplanned", "reason": "",
        "capture": "", "values": [], "matches": [], "manifest": {}, "kernels": {},
        "tuning": {}, "compiled": compile_kernels, "patterns": selected, "notes": [],
    }

    def finish(reason: str = "") -> Path:
        doc["status"] = "unplanned" if reason else "planned"
        doc["reason"] = reason
        (folder / PLAN_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        return folder

    if device.type not in ("cpu", "cuda"):
        return finish(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                      f"(reference implementation) only")
    graph_json = folder / "graph.json"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = capture(module, example_inputs, graph_json)
    except CaptureError as error:
        return finish(f"cannot be exported with torch.export, nor captured: {error}")
    except Exception as error:  # noqa: BLE001
        return finish(f"capture failed: {_first_line(error)}")
    doc["capture"] = graph["source"]["capture"]
    if doc["capture"] != "torch.export":
        export_error = (graph["source"].get("export_error") or "").splitlines()[:1] or [""]
        return finish(f"cannot be exported with torch.export ({export_error[0]}); composition "
                      f"needs one exported graph")
    doc["values"] = [{"id": v["id"], "kind": v.get("kind"), "target": v.get("target")}
                     for v in graph["values"]]

    try:
        run_engine("discover", str(graph_json), "--json", str(folder / "matches.json"),
                   "--precision", precision)
        doc["matches"] = json.loads((folder / "matches.json").read_text()).get("matches", [])
        if tune > 0:
            if device.type != "cuda":
                doc["notes"].append(f"tune={tune} not done: tuning runs kernels on a GPU "
                                    f"(the inputs are on {device.type})")
            else:
                if selected is not None:
                    doc["notes"].append("tuning covers every accepted GEMM of the graph, not "
                                        "only the selected patterns (fact tune takes the graph)")
                try:
                    doc["tuning"] = _engine_tune(graph_json, folder / "tune", precision, tune)
                except RuntimeError as error:
                    doc["notes"].append(f"tuning failed: {str(error).splitlines()[0]}")
        args = ["realize", str(graph_json), "-o", str(folder / "kernels"), "--precision", precision]
        if compile_kernels:
            args.append("--compile")
        proc = run_engine(*args, check=False)
    except EngineNotFound as error:
        return finish(str(error))
    except RuntimeError as error:
        return finish(f"the engine failed: {str(error).splitlines()[0]}")
    manifest_file = folder / "kernels" / "manifest.json"
    if not manifest_file.is_file():
        lines = (proc.stderr or "").strip().splitlines()
        return finish(f"fact realize failed (exit {proc.returncode}): {lines[-1] if lines else ''}")
    doc["manifest"] = json.loads(manifest_file.read_text())
    if proc.returncode != 0:
        doc["notes"].append("fact realize: some kernels did not compile (listed per GEMM)")
    doc["kernels"] = {k["key"]: k["library"] for k in doc["manifest"].get("kernels", [])
                      if k.get("library") and k.get("status") in ("built", "cached")}
    return finish()


def load_plan(plan_dir: str | Path) -> tuple[dict, Path]:
    """(plan.json's document, the folder it is in); `plan_dir` may name the file itself."""
    path = Path(plan_dir)
    file = path if path.is_file() else path / PLAN_FILE
    doc = json.loads(file.read_text())
    if doc.get("schema") != PLAN_SCHEMA:
        raise ValueError(f"{file} is not a {PLAN_SCHEMA} plan")
    return doc, file.parent


# --------------------------------------------------------------------------------------------
# Applying (pure Python)


def _compile_remainder(composed: ComposedModule, example_inputs: tuple) -> None:
    """torch.compile (Inductor, default mode) of the composed graph, run once on the example
    inputs; on failure the remainder stays eager with the reason in the report."""
    try:
        compiled = torch.compile(composed.graph_module, dynamic=False)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(*example_inputs)
    except Exception as error:  # noqa: BLE001 - never crash: eager instead
        composed.fact_report.remainder = f"eager (Inductor compilation failed: {_first_line(error)})"
        return
    composed.__dict__["_compiled"] = compiled
    composed.fact_report.remainder = "inductor"


def _capture_cuda_graph(composed: ComposedModule, example_inputs: tuple) -> None:
    fn = composed._compiled if composed._compiled is not None else composed.graph_module
    try:
        runner = _CudaGraphRunner(fn, example_inputs)
    except Exception as error:  # noqa: BLE001 - capture trouble: run without the graph
        composed.fact_report.cuda_graphs = f"off (capture failed: {_first_line(error)})"
        return
    composed.__dict__["_cuda_graph"] = runner
    composed.fact_report.cuda_graphs = "on"


def apply_plan(module: torch.nn.Module, example_inputs: Sequence[Any] | Any, plan_dir: str | Path,
               *, remainder: str = "inductor", cuda_graphs: bool = False,
               patterns: Iterable[str] | str | None = None, verify: bool = True,
               kernel_dir: str | Path | None = None,
               report_path: str | Path | None = None) -> ComposedModule:
    """Applies a saved plan (written by `plan`) to `module`: no engine needed. The inputs must
    have the plan's shapes and dtypes (any device: CUDA loads the plan's kernel libraries, the
    CPU composes with the reference implementation). Relative library paths resolve against
    `kernel_dir` (default: the plan's folder). `patterns` further narrows the plan's selection.
    Writes the report to `report_path` when given. Raises ValueError for an unknown remainder;
    anything else is reported, never raised."""
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, not '{remainder}'")
    doc, folder = load_plan(plan_dir)
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    precision = doc["precision"]
    report = FactReport(precision=precision, device=str(device), capture=doc.get("capture", ""),
                        work_dir=str(folder), notes=list(doc.get("notes", [])))
    if cuda_graphs:
        report.cuda_graphs = "off (asked for; not reached: nothing composed)"

    def done(composed: ComposedModule) -> ComposedModule:
        report.op_implementation = op_implementation(device.type)  # after the libraries loaded
        if report_path is not None:
            Path(report_path).write_text(json.dumps(report.to_json(), indent=2) + "\n")
        return composed

    def unoptimized(reason: str) -> ComposedModule:
        report.leave("module", reason)
        return done(ComposedModule(module, None, None, report))

    if doc.get("status") != "planned":
        return unoptimized(doc.get("reason", "not planned"))
    if device.type == "cpu" and precision == "tf32":
        return unoptimized("precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are on "
                           "the CPU, where only 'strict' and 'native' compose (with the "
                           "reference implementation)")
    if device.type not in ("cpu", "cuda"):
        return unoptimized(f"inputs on '{device.type}': FACT composes for cuda (kernels) and cpu "
                           f"(reference implementation) only")
    given = _input_specs(example_inputs)
    if given != doc.get("inputs"):
        return unoptimized(f"inputs {given} differ from the plan's {doc.get('inputs')}; plan again "
                           f"for them")

    shapes_logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    shapes_level = shapes_logger.level
    try:
        shapes_logger.setLevel(logging.ERROR)
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = torch.export.export(module, example_inputs, strict=False)
    except Exception as error:  # noqa: BLE001 - any export failure leaves the module as is
        return unoptimized(f"cannot be exported with torch.export ({_first_line(error)})")
    finally:
        shapes_logger.setLevel(shapes_level)

    manifest = doc.get("manifest", {})
    kernels_by_key = {k["key"]: k for k in manifest.get("kernels", [])}
    libraries = doc.get("kernels", {})
    library_root = Path(kernel_dir) if kernel_dir is not None else folder
    realized = {(g["match"], g["gemm"]): g for g in manifest.get("gemms", [])}
    tuning = doc.get("tuning", {})
    rejected = doc.get("rejected", {})
    # No in-graph guard function: ComposedModule's signature guard checks shapes, dtypes,
    # devices, strides and alignment before the graph runs.
    graph_module = exported.module(check_guards=False)
    values = _value_nodes(graph_module, doc.get("values", []))
    on_gpu = device.type == "cuda"
    plan_selection = doc.get("patterns")
    selected = _normalize_patterns(patterns)
    for name in sorted(set(selected or []) | set(plan_selection or [])):
        if not any(m.get("rule") == name or m.get("pattern") == name for m in doc.get("matches", [])):
            report.notes.append(f"patterns: '{name}' names no match of this module")
    if on_gpu and not verify:
        report.notes.append("verify=False: the composed kernels were not checked against float64")

    for match_index, match in enumerate(doc.get("matches", [])):
        label = _match_label(match)
        if match.get("status") != "accepted":
            report.leave(label, f"{match.get('status')}: {match.get('reason', '')}")
            continue
        if match.get("pattern") not in GEMM_FAMILY_PATTERNS or not match.get("gemms"):
            report.leave(label, f"pattern '{match.get('pattern')}' is not composed yet "
                                f"(only the GEMM family: {', '.join(GEMM_FAMILY_PATTERNS)})")
            continue
        if not _selected(match, plan_selection) or not _selected(match, selected):
            chosen = selected if not _selected(match, selected) else plan_selection
            report.leave(label, f"not selected (patterns={', '.join(chosen)})")
            continue
        if str(match_index) in rejected:
            report.leave(label, f"rejected when the plan was packaged: {rejected[str(match_index)]}")
            continue
        calls, why_not = _plan_calls(match, values)
        if why_not:
            report.leave(label, why_not)
            continue
        entries, refusal = [], ""
        for gemm_index, (problem, call) in enumerate(zip(match["gemms"], calls)):
            entry = realized.get((match_index, gemm_index), {})
            kernel = kernels_by_key.get(entry.get("kernel", ""), {})
            if entry.get("error"):
                status = f"no kernel: {entry['error']}"
            elif kernel:
                status = kernel.get("status", "") + (f": {kernel['reason']}" if kernel.get("reason") else "")
            else:
                status = "not in the realize manifest"
            call.kernel_id = kernel.get("key", "")
            composed_gemm = ComposedGemm(
                match=match.get("rule", "?"), nodes=list(match["nodes"]),
                fusion=problem.get("fusion", ""), shape=problem.get("shape", ""),
                implementation="reference (CPU)", kernel_status=status,
                config=entry.get("config", entry.get("kernel_name", "")),
                config_source=entry.get("config_source", "default" if entry.get("kernel") else ""),
                tune_seconds=(tuning.get(f"{match_index}:{gemm_index}") or {}).get("seconds"))
            entries.append(composed_gemm)
            if not on_gpu or refusal:
                continue
            what = f"GEMM {gemm_index} ({problem.get('fusion')})"
            limit = _gpu_limit(problem)
            library = libraries.get(call.kernel_id, "")
            if limit:
                refusal = f"{what}: the kernel ABI cannot express {limit}"
            elif not library:
                refusal = f"{what}: {status if status.startswith('no kernel') else 'no compiled kernel (' + status + ')'}"
            else:
                path = Path(library) if Path(library).is_absolute() else library_root / library
                try:
                    call.handle = kernels.load(path)
                except Exception as error:  # noqa: BLE001 - a library that does not load
                    refusal = f"{what}: {_first_line(error)}"
                    continue
                composed_gemm.implementation = f"kernel {kernel.get('name', '?')}"
                tolerance = _manifest_tolerance(entry)
                if verify and tolerance is None:
                    refusal = f"{what}: the realize manifest gives no tolerance to verify against"
                elif verify:
                    rel_err, tolerance, failure = _verify_call(call, values, precision, tolerance, device,
                                                               seed=1000 * match_index + gemm_index)
                    composed_gemm.rel_err, composed_gemm.tolerance = rel_err, tolerance
                    if failure:
                        refusal = f"{what}: {failure}"
        if refusal:
            report.leave(label, refusal)
            continue
        _insert_calls(graph_module.graph, match, values, calls)
        report.composed.extend(entries)

    if not report.composed:
        return done(ComposedModule(module, None, None, report))
    graph_module.graph.lint()
    graph_module.recompile()
    composed = ComposedModule(module, graph_module, _signature(example_inputs), report)
    if remainder == "inductor":
        _compile_remainder(composed, example_inputs)
    else:
        report.remainder = "eager"
    if cuda_graphs:
        if on_gpu:
            _capture_cuda_graph(composed, example_inputs)
        else:
            report.cuda_graphs = f"off (asked for; CUDA graphs need CUDA inputs, these are on {device.type})"
    return done(composed)


# --------------------------------------------------------------------------------------------
# Public API


def optimize(module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
             precision: str = "strict", *, work_dir: str | Path | None = None,
             remainder: str = "inductor", cuda_graphs: bool = False,
             patterns: Iterable[str] | str | None = None, tune: int = 0,
             verify: bool = True) -> ComposedModule:
    """Returns `module` with its GEMM-family subgraphs composed as `fact::gemm` calls: `plan`
    (engine) then `apply_plan` (see the module docstring and docs/compose.md).

    precision: "strict" | "tf32" | "native". remainder: "inductor" (torch.compile of the
    rewritten graph, eager on failure) or "eager". cuda_graphs: capture the planned signature's
    forward into a CUDA graph (CUDA inputs). patterns: None = all, else rule or pattern names
    to compose (others are left to PyTorch as "not selected"). tune: 0 = realize's default
    configuration (or a stored tuned one); N > 0 = tune each GEMM over at most N configurations
    on the GPU first. verify: check each kernel against float64 on the GPU, leaving failing
    matches to PyTorch. Never raises for a module that runs (ValueError for an unknown
    precision or remainder): what was left to PyTorch, and why, is in `.fact_report`, also
    written to `<work_dir>/report.json`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not '{precision}'")
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, not '{remainder}'")
    example_inputs = _normalize_inputs(example_inputs)
    device = _device_of(example_inputs)
    if device.type == "cpu" and precision == "tf32":
        report = FactReport(precision=precision, device=str(device))
        report.leave("module", "precision 'tf32' needs a GPU (TF32 tensor cores); the inputs are "
                               "on the CPU, where only 'strict' and 'native' compose (with the "
                               "reference implementation)")
        return ComposedModule(module, None, None, report)
    folder = plan(module, example_inputs, precision, work_dir=work_dir, patterns=patterns,
                  tune=tune)
    return apply_plan(module, example_inputs, folder, remainder=remainder,
                      cuda_graphs=cuda_graphs, verify=verify, report_path=folder / "report.json")
