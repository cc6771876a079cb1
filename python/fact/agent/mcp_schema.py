"""What `fact mcp` publishes about its tools besides their descriptions: each input parameter's
description (PARAMETERS, by name: the same name means the same thing in every tool) and each
tool's output schema (OUTPUTS, pydantic models). Every answer has "status"; the other fields are
typed where every answer of that tool has them, and answers may carry more (extra fields are
allowed: "error" answers carry "error", "needs_gpu" ones "reason" and "message").

The enumerated values (dtype, precision, arch) are not here: fact.agent.mcp_server reads them
from the engine's tables (fact.engine_tables) when it builds the tools.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

PARAMETERS = {
    "model_file": "A model file and class, path/to/model.py:ClassName; the file defines get_inputs() "
                  "(and optionally get_init_inputs()).",
    "dtype": "The dtype the model's floating parameters and inputs are cast to.",
    "graph": "Path of a captured graph (graph.json), as capture_model returned it.",
    "node": "One node's id (inspect_graph lists them); omit for all nodes.",
    "max_nodes": "At most this many nodes are listed.",
    "precision": "The precision contract (tolerance) to verify in; omit for the model dtype's default "
                 "(strict for float32, native for bfloat16/float16).",
    "arch": "Where the kernel runs: host (C++ on this machine's CPU path) or sm_90a (CUDA on a Hopper GPU).",
    "match": "A match of discover: its label (\"2\") or its rule name (\"attention_causal\").",
    "query": "Text the entry's id, rule or pattern must contain (empty: any).",
    "rule": "Only entries of this rule.",
    "include_builtin": "Also list the built-in template entries.",
    "entry_id": "A registry entry's id, or a prefix of it naming one entry.",
    "include_source": "Include the kernel's source text.",
    "k": "How many examples at most.",
    "call": "Which call of the match (0 = the first; a match may need several kernels).",
    "config": "A configuration's name from the realizer's pruned space (a failed answer lists them).",
    "params": "Parameters the chosen configuration must have, e.g. {\"cluster\": [2, 1, 1]}.",
    "space": "The parameter space to choose from: default (pruned) or full.",
    "source": "The kernel's complete source in the subgraph ABI: include get_task's `include` and define "
              "get_task's `entry`.",
    "name": "A name for the kernel (its library's file name).",
    "candidate": "A candidate's id (t1, s2, ...) from realize_from_template / realize_from_source.",
    "timeout": "Seconds the gates' child process may run before it is stopped (a hang fails the check).",
    "max_candidates": "How many configurations of each template match to build and time at most.",
    "author": "Who wrote the kernel (stored in the entry's provenance).",
    "model": "The LLM that wrote it, if any (provenance).",
    "endpoint": "Where that LLM was reached (provenance).",
    "prompt": "The prompt that produced it; only its SHA-256 is stored (provenance).",
    "speed_override": "Only for kernels that test something else than speed: why a kernel slower than PyTorch "
                      "may enter anyway. Stored in the entry and named by every discovery, plan and report "
                      "that uses it. Leave empty for real kernels.",
    "iters": "Timed runs of each side (after warm-up runs).",
    "ms": "A measured time in milliseconds to place on the roofline.",
}


class Answer(BaseModel):
    """Every tool's answer."""
    model_config = ConfigDict(extra="allow")
    status: Literal["ok", "failed", "error", "needs_gpu"] = Field(
        description="ok; failed (a build, a gate or the registry said no: the details say where); error; "
                    "needs_gpu (only a Hopper GPU can do it). Anything but ok also sets isError.")


class DeviceStatus(Answer):
    gpu: bool
    gpu_unavailable: Optional[str] = None
    cuda_compile: bool
    cuda_compile_unavailable: Optional[str] = None
    profile: Optional[dict[str, Any]] = None
    archs: list[str]


class Captured(Answer):
    graph: str = Field(description="path of the graph JSON, for the graph parameter of other tools")
    module: Optional[str] = None
    capture: Optional[str] = None
    nodes: int
    values: int
    inputs: list[Any]
    outputs: list[Any]


class Inspected(Answer):
    node: Optional[dict[str, Any]] = None
    module: Optional[str] = None
    node_count: Optional[int] = None
    nodes: Optional[list[dict[str, Any]]] = None
    truncated: Optional[bool] = None


class Discovered(Answer):
    precision: str
    arch: str
    registry: dict[str, Any]
    matches: list[dict[str, Any]] = Field(description="label, rule, classification (REUSE / ADAPT / NEW), "
                                                      "classification_reason, registry_entry, calls, estimates")
    table: str


class RegistrySearch(Answer):
    registry: str
    version: int
    entries: list[dict[str, Any]]


class RegistryEntry(Answer):
    entry: dict[str, Any]


class Task(Answer):
    label: str
    precision: str
    arch: str
    match: dict[str, Any]
    semantics: list[str] = Field(description="the ATen ops the kernel replaces, one line each")
    semantics_hash: str
    operands: list[dict[str, Any]]
    results: list[dict[str, Any]]
    tolerance: float
    include: str = Field(description="the line the kernel source includes")
    headers: list[dict[str, str]] = Field(description="{path, text} of the included headers")
    dtype_codes: dict[str, int] = Field(description="FactTensor.dtype value of each element type")
    return_codes: dict[str, int] = Field(description="what fact_entry returns: FACT_OK, errors")
    entry: str = Field(description="the function the source defines")


class Examples(Answer):
    query: str
    examples: list[dict[str, Any]]


class Realized(Answer):
    candidate: str
    source_file: str


class Built(Answer):
    candidate: str
    build: Optional[str] = None
    cached: bool = Field(description="the kernel cache held the library: nothing was compiled now")
    seconds: float = Field(description="this call's time")
    compile_seconds: Optional[float] = Field(default=None, description="the compile's own time (the original one "
                                                                      "when cached)")
    library: str
    diagnostics: list[dict[str, Any]]


class Verified(Answer):
    candidate: str
    passed: bool
    failed_check: Optional[str] = None
    rel_err: Optional[float] = None
    tolerance: Optional[float] = None
    timing: Optional[dict[str, Any]] = Field(default=None, description="ms, baseline_ms (PyTorch, same run), "
                                                                      "speedup, timer")
    faster_than_pytorch: bool
    checks: list[dict[str, Any]]


class Tuned(Answer):
    timing: Optional[dict[str, Any]] = None
    plan: Optional[Any] = None
    summary: Optional[Any] = None


class Registered(Answer):
    registered: bool
    entry: str
    revision: Optional[int] = None
    registry_version: Optional[int] = None
    timing: Optional[dict[str, Any]] = None
    speed_override: str = ""


class Composed(Answer):
    device: str
    work_dir: str
    composed: list[dict[str, Any]]
    left_to_pytorch: list[Any]
    max_abs_diff_vs_original: float
    notes: list[str]


class Benchmarked(Answer):
    device: str
    composed_ms: float
    baseline_ms: float
    speedup: float
    timer: str


class Explained(Answer):
    flops: float
    min_bytes: float
    arithmetic_intensity: Optional[float] = None
    ridge_point: Optional[float] = None
    bound: str
    roofline_ms: float
    measured_ms: Optional[float] = None
    counters: dict[str, Any]


OUTPUTS = {
    "device_status": DeviceStatus, "capture_model": Captured, "inspect_graph": Inspected,
    "discover": Discovered, "search_registry": RegistrySearch, "show_registry_entry": RegistryEntry,
    "get_task": Task, "retrieve_examples": Examples, "realize_from_template": Realized,
    "realize_from_source": Realized, "build": Built, "verify": Verified, "tune": Tuned,
    "register_kernel": Registered, "compose": Composed, "benchmark": Benchmarked,
    "explain_performance": Explained,
}
