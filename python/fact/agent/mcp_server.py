"""`fact mcp`: FACT's stages as Model Context Protocol tools over stdio, for any agent
(docs/agent.md). Built on the official MCP Python SDK (mcp.server.mcpserver.MCPServer) around the
engine's in-process API (libfact's C API through fact.agent.engine).

Every tool answers a JSON object (its structured content, with a published output schema) with
"status": "ok", "error" (with "error"), "failed" (a build, a gate or the registry said no; the
details say where), or "needs_gpu" ("needs a Hopper GPU: <reason>" for what only a Hopper GPU
can do, here and now). Every status but "ok" also sets the protocol's isError flag. Compiler
diagnostics come as {file, line, column, severity, message}; gate failures with the failing
check, the element's index, its value, the reference and the magnitude; timings with the
same-run baseline. Parameters are described (fact.agent.mcp_schema), with enums read from the
engine's tables; every tool publishes an output schema.

Kernels an agent proposes are "candidates" (realize_from_template / realize_from_source), kept
in the server's work folder (<work>/candidates/<id>/candidate.json): a server started again on
the same work folder knows them. They reach the registry only through register_kernel, which
runs every gate first — the same gates as built-in kernels and as `fact optimize --agent` — and
the registry's speed rule (no kernel slower than PyTorch).
Agent kernels run their gates in child processes with time limits: a crash or a hang fails that
call, never the server. Model files are captured, planned, tuned, composed and timed in this
process, through the same API as `fact optimize` and `fact.optimize` (fact.optimize_run,
fact.compose, libfact's C API): no CLI is started and no output is parsed.
"""
from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
import warnings
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from fact import engine_tables
from fact.agent import engine, examples as retrieval, gates
from fact.agent import mcp_schema
from fact.agent.fragment import Fragment
from fact.agent.synthesize import registry_entry

ARCHS = ("host", "sm_90a")  # the registry's architectures (include/fact/registry/registry.hpp)

INSTRUCTIONS = """FACT replaces subgraphs of PyTorch models with verified CUTLASS / C++ kernels.
Typical flow: capture_model -> discover (REUSE / ADAPT / NEW per match) -> get_task and
retrieve_examples for a match -> realize_from_template (a built-in template with parameters) or
realize_from_source (your kernel in the subgraph ABI) -> build (compiler diagnostics with file and
line) -> verify (FACT's gates: float64 reference, poisoned outputs, adversarial checks, timing) ->
register_kernel (only after every gate) -> compose / benchmark -> explain_performance.
arch "host" kernels run on this machine's CPU path; "sm_90a" kernels need a Hopper GPU.
Default arch of every tool here: {default_arch} (this machine {has} a Hopper GPU).
Every answer is a JSON object with "status" (ok | failed | error | needs_gpu); anything but ok
also sets isError. A kernel enters the registry only when it passes every gate AND is at least
as fast as PyTorch's run of the subgraph it replaces (measured by the gates, same run)."""


def _ok(**fields: Any) -> dict:
    return {"status": "ok", **fields}


def _error(message: str, **fields: Any) -> dict:
    return {"status": "error", "error": message, **fields}


def _needs_gpu(reason: str, **fields: Any) -> dict:
    return {"status": "needs_gpu", "needs": "a Hopper GPU", "reason": reason,
            "message": f"needs a Hopper GPU: {reason}", **fields}


class FactTools:
    """The tools' state: the work folder and the candidates proposed so far."""

    def __init__(self, work_dir: str | Path | None = None, registry_dir: str | Path | None = None):
        self.work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="fact_mcp_"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.registry_dir = registry_dir or os.environ.get("FACT_REGISTRY_DIR") or None
        self._default_arch: str | None = None
        self.candidates: dict[str, dict] = self._load_candidates()

    @property
    def default_arch(self) -> str:
        """The arch every tool takes when none is given: sm_90a with a Hopper GPU, else host."""
        if self._default_arch is None:
            try:
                self._default_arch = "host" if self._gpu() else "sm_90a"
            except Exception:  # noqa: BLE001 - no engine: the tools say so when called
                self._default_arch = "host"
        return self._default_arch

    def _arch(self, arch: str | None) -> str:
        return arch or self.default_arch

    # -- candidates, kept on disk -------------------------------------------------------------

    def _load_candidates(self) -> dict[str, dict]:
        """The candidates a server on this work folder proposed before (candidate.json each)."""
        found = {}
        for record in sorted((self.work / "candidates").glob("*/candidate.json")):
            try:
                doc = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and doc.get("id") == record.parent.name:
                found[doc["id"]] = doc
        return found

    def _save(self, candidate: str) -> None:
        folder = self.work / "candidates" / candidate
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".candidate.json.{uuid.uuid4().hex[:6]}"
        temporary.write_text(json.dumps({**self.candidates[candidate], "id": candidate}, indent=1, default=str))
        temporary.replace(folder / "candidate.json")

    def _new_id(self, prefix: str) -> str:
        taken = [int(name[1:]) for name in self.candidates if name[1:].isdigit()]
        folders = self.work / "candidates"
        if folders.is_dir():
            taken += [int(f.name[1:]) for f in folders.iterdir() if f.name[1:].isdigit()]
        return f"{prefix}{max(taken, default=0) + 1}"

    # -- helpers -----------------------------------------------------------------------------

    def _composed_model(self, model_file: str, dtype: str, precision: str | None, out: Path):
        """(the model file's module, its inputs, fact.optimize of it, the device), in this process:
        the eager remainder, no whole-module speed guard (the raw composed module), but every
        replacement timed against its subgraph (none slower than PyTorch is composed)."""
        import torch

        import fact
        from fact.model_file import build_from_model_file

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model, inputs = build_from_model_file(model_file, dtype, device)
        composed = fact.optimize(model, inputs, precision=precision, work_dir=out, remainder="eager",
                                 speed_guard=False, replacement_guard=True)
        return model, inputs, composed, device

    def _gpu(self) -> str | None:
        return engine.device().get("gpu_unavailable")

    def _candidate(self, candidate: str) -> dict:
        if candidate not in self.candidates:
            self.candidates.update(self._load_candidates())
        if candidate not in self.candidates:
            raise KeyError(f"no candidate {candidate!r} (realize_from_template / realize_from_source make them; "
                           f"known: {', '.join(self.candidates) or 'none'})")
        return self.candidates[candidate]

    # -- the tools ---------------------------------------------------------------------------

    def device_status(self) -> dict:
        """What this machine can do: a Hopper GPU or not (and why), a compiler for CUDA kernels or
        not, the host compiler, and the device profile (peak rates for rooflines)."""
        info = engine.device()
        return _ok(gpu=info.get("gpu_unavailable") is None, gpu_unavailable=info.get("gpu_unavailable"),
                   cuda_compile=info.get("compile_unavailable") is None,
                   cuda_compile_unavailable=info.get("compile_unavailable"), profile=info.get("profile"),
                   archs=["host"] + ([] if info.get("gpu_unavailable") else ["sm_90a"]))

    def capture_model(self, model_file: str, dtype: str = "float32") -> dict:
        """Capture a model file (path/to/model.py:ClassName, defining get_inputs() and optionally
        get_init_inputs()) as FACT graph JSON, on the device it will run on (in this process)."""
        from fact.graph_capture import capture
        from fact.model_file import build_from_model_file

        folder = self.work / f"graph-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        graph = folder / "graph.json"
        try:
            model, inputs = build_from_model_file(model_file, dtype, "cpu" if self._gpu() else "cuda")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                doc = capture(model, inputs, graph)
        except Exception as error:  # noqa: BLE001 - the model file's failure is the answer
            return _error(f"capture failed: {type(error).__name__}: {error}"[:1500])
        return _ok(graph=str(graph), module=doc["source"].get("module"), capture=doc["source"].get("capture"),
                   nodes=len(doc["nodes"]), values=len(doc["values"]), inputs=doc["inputs"], outputs=doc["outputs"])

    def inspect_graph(self, graph: str, node: str | None = None, max_nodes: int = 200) -> dict:
        """The nodes of a captured graph (op, arguments, output shapes and dtypes), or one node."""
        doc = json.loads(Path(graph).read_text())
        values = {v["id"]: v for v in doc["values"]}

        def brief(n: dict) -> dict:
            return {"id": n["id"], "target": n["target"],
                    "args": [next(iter(a.values())) if len(a) == 1 else a for a in n.get("args", [])],
                    "outputs": [{"id": o, "shape": values[o]["shape"], "dtype": values[o]["dtype"]}
                                for o in n.get("outputs", []) if o in values]}
        if node is not None:
            found = [n for n in doc["nodes"] if n["id"] == node]
            return _ok(node=brief(found[0])) if found else _error(f"no node {node!r}")
        nodes = [brief(n) for n in doc["nodes"][:max_nodes]]
        return _ok(module=doc["source"].get("module"), node_count=len(doc["nodes"]), nodes=nodes,
                   truncated=len(doc["nodes"]) > max_nodes,
                   inputs=[values[i] for i in doc["inputs"]], outputs=doc["outputs"])

    def discover(self, graph: str, precision: str | None = None, arch: str | None = None) -> dict:
        """Discover and rank the subgraphs worth replacing; each match is classified against the
        pattern registry (REUSE / ADAPT / NEW, with the reason and the entry)."""
        arch = self._arch(arch)
        doc = engine.discover(graph, precision=precision, arch=arch, registry_dir=self.registry_dir)
        matches = []
        for index, m in enumerate(doc["matches"]):
            matches.append({"label": str(index + 1), "rule": m["rule"], "pattern": m["pattern"], "status": m["status"],
                            "reason": m["reason"], "classification": m["classification"],
                            "classification_reason": m.get("classification_reason", ""),
                            "registry_entry": m.get("registry_entry", ""), "dtype": m["dtype"], "nodes": m["nodes"],
                            "est_before_us": m["est_before_us"], "est_after_us": m["est_after_us"],
                            "est_saved_us": m["est_saved_us"],
                            "calls": [{"kind": p["kind"], **{k: v for k, v in p.items() if k != "kind"}}
                                      for p in m["problems"]]})
        return _ok(precision=doc["precision"], arch=arch, registry=doc["registry"], matches=matches,
                   table=doc["table"])

    def search_registry(self, query: str = "", rule: str | None = None, dtype: str | None = None,
                        arch: str | None = None, include_builtin: bool = True) -> dict:
        """Registry entries T(rule, dtype, arch) whose id, rule or pattern contain `query` (and
        that have the rule / dtype / arch given): how each is realized, verified, tuned, and
        where it came from."""
        listing = engine.registry("list", dir=self.registry_dir, builtin=include_builtin)
        found = []
        for e in listing["entries"]:
            text = " ".join(str(e.get(k, "")) for k in ("id", "rule", "pattern")).lower()
            if query and query.lower() not in text:
                continue
            if rule and e.get("rule") != rule or dtype and e.get("dtype") != dtype or arch and e.get("arch") != arch:
                continue
            found.append({"id": e["id"], "rule": e["rule"], "dtype": e["dtype"], "arch": e["arch"],
                          "origin": e["origin"], "realization": e.get("realization"),
                          "verified": e.get("verified", []), "tuned": e.get("tuned", []),
                          "provenance": e.get("provenance", {})})
        return _ok(registry=listing["dir"], version=listing["version"], entries=found)

    def show_registry_entry(self, entry_id: str, include_source: bool = False) -> dict:
        """One registry entry in full (the source only when asked)."""
        entry = engine.registry("show", dir=self.registry_dir, id=entry_id)["entry"]
        if not include_source and isinstance(entry.get("source"), dict):
            entry["source"] = {k: v for k, v in entry["source"].items() if k != "text"}
        return _ok(entry=entry)

    def get_task(self, graph: str, match: str, arch: str | None = None, precision: str | None = None) -> dict:
        """The task for one match (label "3" or rule name): its reference semantics (the ATen
        ops it replaces), the call a kernel implements (operands and results with dtype, shape,
        strides; tolerance), the header to include with its full text (the subgraph ABI and the
        common ABI it includes), the dtype codes of FactTensor.dtype, the return codes, and the
        entry's signature."""
        arch = self._arch(arch)
        task = engine.task(graph, match, precision=precision, arch=arch, registry_dir=self.registry_dir)
        call = task["call"]
        abi = task["abi"]
        headers = [{"path": "fact/runtime/fact_subgraph_abi.h", "text": abi.get("text", "")}]
        common = abi.get("common", "")
        if common:
            headers.append({"path": "fact/core/fact_abi.h (included by it)", "text": common})
        tables = engine_tables.tables()
        # FactTensor.dtype of each element type a subgraph can pass (-1: none)
        dtype_codes = {entry["name"]: entry["subgraph_abi"] for entry in tables["dtypes"]
                       if entry["name"] != "unknown" and entry.get("subgraph_abi", -1) >= 0}
        return _ok(label=task["label"], module=task.get("module"), precision=task["precision"], arch=arch,
                   match={k: task["match"][k] for k in ("rule", "pattern", "status", "reason", "classification",
                                                        "classification_reason", "dtype", "nodes")},
                   semantics=Fragment(task["semantics"]["fragment"]).describe(),
                   semantics_hash=task["semantics"]["hash"],
                   operands=[{k: t[k] for k in ("value", "dtype", "shape", "stride")} for t in call["operands"]],
                   results=[{k: t[k] for k in ("value", "dtype", "shape", "stride")} for t in call["results"]],
                   tolerance=call["tolerance"], include='#include "fact/runtime/fact_subgraph_abi.h"',
                   abi_header=abi["header"], abi=abi.get("text", ""), headers=headers,
                   dtype_codes=dtype_codes,
                   return_codes={entry["name"]: entry["value"] for entry in tables["status"]},
                   entry=abi["entry"],
                   speed=("register_kernel takes a kernel only when the gates time it at least as fast as "
                          "PyTorch's run of this subgraph (same process, same inputs)"),
                   registry=[{"id": e["id"], "origin": e["origin"]} for e in task.get("registry", [])])

    def retrieve_examples(self, graph: str, match: str, arch: str | None = None, k: int = 5) -> dict:
        """The most relevant vetted examples for a match, ranked on its ops, kind and dtype:
        registry kernels of the same rule or pattern (verified by the gates) and the CUTLASS
        examples shipped in the installed nvidia-cutlass wheel."""
        arch = self._arch(arch)
        task = engine.task(graph, match, arch=arch, registry_dir=self.registry_dir)
        entries = engine.registry("list", dir=self.registry_dir, full=True)["entries"]
        found = retrieval.retrieve({**task, "arch": arch}, entries, k=k)
        return _ok(query=retrieval.task_query(task), examples=[e.to_json() for e in found])

    def realize_from_template(self, graph: str, match: str, call: int = 0, precision: str | None = None,
                              config: str | None = None, params: dict | None = None,
                              space: str = "default") -> dict:
        """A kernel from a built-in template: call `call` of the match, with the configuration
        named `config` or the first whose parameters include `params` (from the realizer's pruned
        space; none: the default). Renders the CUTLASS source; build compiles it."""
        doc = engine.discover(graph, precision=precision, arch="sm_90a", registry_dir=self.registry_dir)
        index = int(match) - 1 if str(match).isdigit() else next(
            (i for i, m in enumerate(doc["matches"]) if m["rule"] == match), -1)
        if not 0 <= index < len(doc["matches"]):
            return _error(f"no match {match!r}")
        m = doc["matches"][index]
        if m["status"] != "accepted":
            return _error(f"match {index + 1} ({m['rule']}) is {m['status']}: no template realizes it "
                          f"({m.get('classification_reason') or m['reason']}); write a kernel (realize_from_source)")
        if not 0 <= call < len(m["problems"]):
            return _error(f"match {index + 1} has {len(m['problems'])} call(s)")
        candidate = self._new_id("t")
        folder = self.work / "candidates" / candidate
        result = engine.realize(m["problems"][call], folder, precision=doc["precision"], space=space, config=config,
                                params=params, compile=False)
        if result.get("status") == "no_config":
            return {"status": "failed", "reason": result["reason"], "configs": result.get("configs", [])}
        self.candidates[candidate] = {"kind": "template", "problem": m["problems"][call], "precision": doc["precision"],
                                      "config": result["name"], "space": space, "source_file": result["source_file"],
                                      "arch": "sm_90a", "graph": graph, "match": str(index + 1)}
        self._save(candidate)
        return _ok(candidate=candidate, name=result["name"], spec=result["spec"], key=result["key"],
                   entry=result["entry"], source_file=result["source_file"],
                   lines=result["source"].count("\n"))

    def realize_from_source(self, source: str, arch: str | None = None, name: str = "agent_kernel") -> dict:
        """Your kernel in the subgraph ABI (get_task's `entry` signature and `include`): C++ for
        arch "host" (this machine's CPU path), CUDA/CUTLASS for "sm_90a". Stored as a candidate
        in the work folder (kept across server restarts); build compiles it, verify runs the
        gates."""
        arch = self._arch(arch)
        candidate = self._new_id("s")
        folder = self.work / "candidates" / candidate
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ("kernel.cpp" if arch == "host" else "kernel.cu")
        path.write_text(source)
        self.candidates[candidate] = {"kind": "source", "source": source, "arch": arch, "name": name,
                                      "source_file": str(path)}
        self._save(candidate)
        return _ok(candidate=candidate, source_file=str(path), lines=source.count("\n") + 1, arch=arch)

    def build(self, candidate: str) -> dict:
        """Compile a candidate (compile only: nothing runs). Failures come back as diagnostics
        with file, line, column and message; CUDA builds use FACT's nvcc line (-O3 -DNDEBUG,
        sm_90a) and fail on ptxas C7510 (wgmma serialized)."""
        c = self._candidate(candidate)
        start = time.perf_counter()
        if c["kind"] == "template":
            result = engine.realize(c["problem"], Path(c["source_file"]).parent, precision=c["precision"],
                                    space=c["space"], config=c["config"], compile=True)
            build = result.get("build", {})
        else:
            build = engine.build(c["source"], device="host" if c["arch"] == "host" else "cuda",
                                 name=c["name"], file_name=Path(c["source_file"]).name)
        seconds = time.perf_counter() - start
        if build.get("status") == "unavailable":
            return _error(f"cannot compile here: {build.get('reason')}", build=build)
        c["library"] = build.get("library") or None
        self._save(candidate)
        status = "ok" if build.get("status") in ("built", "cached") else "failed"
        cached = build.get("status") == "cached"
        return {"status": status, "candidate": candidate, "build": build.get("status"), "cached": cached,
                "reason": build.get("reason", ""), "library": build.get("library", ""), "seconds": seconds,
                "compile_seconds": build.get("seconds"),
                "note": ("the kernel cache held this source's library: nothing was compiled now; seconds is "
                         "this call's time, compile_seconds the original compile's" if cached else ""),
                "diagnostics": build.get("diagnostics", []),
                "log_tail": build.get("log", "")[-3000:] if status != "ok" else ""}

    def verify(self, candidate: str, graph: str, match: str, timeout: float = 120.0) -> dict:
        """Run FACT's gates on a built candidate for a match: float64 reference on fresh inputs
        with poisoned outputs, completion on return / on the stream, unchanged inputs, guard
        bands, NaN, re-poisoned re-run, new inputs, another stream, and FACT's timer with the
        same-run PyTorch baseline. In a child process with a time limit."""
        c = self._candidate(candidate)
        if c["kind"] == "template":
            why = self._gpu()
            if why:
                return _needs_gpu(f"{why}; template kernels are CUDA (sm_90a) and run only there", candidate=candidate)
        if c["arch"] != "host":
            why = self._gpu()
            if why:
                return _needs_gpu(why, candidate=candidate)
        if not c.get("library"):
            built = self.build(candidate)
            if built["status"] != "ok":
                return {"status": "failed", "stage": "build", **{k: built[k] for k in ("reason", "diagnostics")}}
        task = engine.task(graph, match, arch=c["arch"], registry_dir=self.registry_dir)
        report = gates.run_gates(task["call"], task["semantics"]["fragment"], c["library"],
                                 device="cpu" if c["arch"] == "host" else "cuda", timeout=timeout,
                                 work_dir=self.work / "gates" / f"{candidate}-{uuid.uuid4().hex[:6]}")
        c["last_gates"] = report.to_json()
        c["task"] = {"graph": graph, "match": match}
        self._save(candidate)
        failed = next((ch for ch in report.checks if not ch["passed"]), None)
        speedup = (report.timing or {}).get("speedup")
        fast_enough = isinstance(speedup, (int, float)) and speedup >= 1.0
        return {"status": "ok" if report.passed else "failed", "candidate": candidate, "passed": report.passed,
                "failed_check": report.failed_check, "failure": report.failure,
                "where": (failed or {}).get("data", {}) if failed else {},
                "rel_err": report.rel_err, "tolerance": report.tolerance, "timing": report.timing,
                "faster_than_pytorch": fast_enough,
                "speed": ("" if not report.passed or fast_enough else
                          f"passes the gates but is slower than PyTorch ({_speed_words(report.timing)}): "
                          f"register_kernel will refuse it; make it faster"),
                "checks": [{"name": ch["name"], "passed": ch["passed"], "detail": ch["detail"]} for ch in report.checks]}

    def tune(self, graph: str, match: str, max_candidates: int = 16, candidate: str | None = None) -> dict:
        """Tune: the graph's template matches over their pruned parameter spaces (`fact tune`:
        build, verify, time each configuration on the GPU; the winners go to the tuning database,
        which makes those matches REUSE), or report an agent candidate's timing (hand-written
        kernels have no parameter space)."""
        if candidate is not None:
            c = self._candidate(candidate)
            if c.get("last_gates"):
                return _ok(candidate=candidate, timing=c["last_gates"].get("timing"),
                           note="a hand-written kernel has no parameter space: its timing is the gates' (FACT's timer)")
            return _error("verify the candidate first (its timing comes from the gates)")
        why = self._gpu()
        if why:
            return _needs_gpu(f"{why}; tuning times every configuration on the device", graph=graph, match=match)
        from fact import _engine

        out = self.work / f"tune-{uuid.uuid4().hex[:8]}"
        request = {"graph": str(graph), "out_dir": str(out), "compile": True, "tune": int(max_candidates),
                   "baselines": ["cublas", "cublaslt"], "device": "cuda", "progress": False}
        if self.registry_dir:
            request["registry_dir"] = str(self.registry_dir)
        code, response = _engine.engine_library().plan(request)
        if code != 0 or response.get("status") != "ok":
            return _error(f"tuning failed: {response.get('error') or response}")
        return _ok(match=match, plan=response.get("plan"), summary=response.get("summary"), work_dir=str(out),
                   note="every template match of the graph was tuned; the winners are in the tuning database")

    def register_kernel(self, candidate: str, graph: str, match: str, author: str = "mcp client",
                        model: str = "", endpoint: str = "", prompt: str = "", timeout: float = 120.0,
                        speed_override: str = "") -> dict:
        """Add a candidate to the pattern registry: the gates run again first (nothing enters
        without them), the kernel must be at least as fast as PyTorch's run of the subgraph it
        replaces (the gates' timing, same run; a slower one is refused), then the entry is stored
        with its provenance (who wrote it: author / model / endpoint / prompt digest) and its
        measured speed, and the match becomes REUSE for the next model."""
        c = self._candidate(candidate)
        if c["kind"] != "source":
            return _error("template kernels are built in; their tuned choices go to the tuning database (tune)")
        verdict = self.verify(candidate, graph, match, timeout=timeout)
        if verdict["status"] != "ok":
            return {**verdict, "registered": False}
        task = engine.task(graph, match, arch=c["arch"], registry_dir=self.registry_dir)
        report = gates.GateReport(**{k: v for k, v in c["last_gates"].items()})
        provenance = {"by": "agent", "author": author, "model": model or None, "endpoint": endpoint or "mcp (stdio)",
                      "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest() if prompt else None,
                      "attempt": None, "log": str(self.work), "task": {"module": task.get("module"), "graph": graph,
                                                                       "label": task["label"]}}
        entry = registry_entry(task, c["source"], report, arch=c["arch"],
                               device="cpu" if c["arch"] == "host" else "cuda", provenance=provenance)
        if speed_override.strip():
            entry["speed_override"] = {"reason": speed_override.strip(), "by": author}
        try:
            stored = engine.registry("add", dir=self.registry_dir, entry=entry)["entry"]
        except engine.AgentEngineError as error:
            return {"status": "failed", "registered": False, "candidate": candidate, "refused": str(error),
                    "timing": report.timing}
        return _ok(registered=True, entry=stored["id"], revision=stored.get("revision"),
                   registry_version=stored.get("registry_version"), timing=report.timing,
                   speed_override=(stored.get("speed_override") or {}).get("reason", ""))

    def compose(self, model_file: str, dtype: str = "float32", precision: str | None = None) -> dict:
        """Compose a model file: plan with the registry (verified agent kernels included) and the
        templates, apply the plan, verify every replacement against the subgraph it replaces in
        float64 (a failing one is left to PyTorch with the reason), and time each kernel against
        the subgraph it replaces: one slower than PyTorch stays PyTorch too (stage "speed"). CPU
        path here (host kernels and the host reference); CUDA kernels on a GPU."""
        import torch

        out = self.work / f"compose-{uuid.uuid4().hex[:8]}"
        try:
            model, inputs, composed, device = self._composed_model(model_file, dtype, precision, out)
            with torch.no_grad():
                got, want = composed(*inputs), model(*inputs)
        except Exception as error:  # noqa: BLE001 - the model file's failure is the answer
            return _error(f"composition failed: {type(error).__name__}: {error}"[:2000])
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        err = max(float((a.double() - b.double()).abs().max()) for a, b in zip(got, want))
        report = composed.fact_report.to_json()
        return _ok(device=device, work_dir=str(out), runs=report.get("runs"),
                   composed=[{k: r.get(k) for k in ("label", "rule", "nodes", "implementation", "verified", "rel_err",
                                                    "tolerance", "calls")} for r in report.get("composed", [])],
                   left_to_pytorch=report.get("left_to_pytorch", []),
                   max_abs_diff_vs_original=err, notes=report.get("notes", []))

    def benchmark(self, model_file: str, dtype: str = "float32", precision: str | None = None,
                  iters: int = 20) -> dict:
        """Time the composed module against the original in the same process on the same inputs
        (FACT's timer: CUDA events with L2 flushed on a GPU, perf_counter on the CPU)."""
        import torch

        from fact import timing

        out = self.work / f"bench-{uuid.uuid4().hex[:8]}"
        try:
            model, inputs, composed_module, device = self._composed_model(model_file, dtype, precision, out)

            def timed(fn):
                if device == "cuda":
                    return timing.time_cuda(fn, 3, int(iters), timing.L2Flusher(256, torch.device("cuda")))
                return timing.time_cpu(fn, 3, int(iters))

            with torch.no_grad():
                composed = timed(lambda: composed_module(*inputs)).to_json()
                original = timed(lambda: model(*inputs)).to_json()
        except Exception as error:  # noqa: BLE001 - the model file's failure is the answer
            return _error(f"the benchmark failed: {type(error).__name__}: {error}"[:2000])
        answer = _ok(device=device, composed_ms=composed["median_ms"], baseline="the original module, eager, same run",
                     baseline_ms=original["median_ms"], speedup=original["median_ms"] / composed["median_ms"],
                     timer=composed["timer"], composed_replacements=len(composed_module.fact_report.composed))
        if device != "cuda":
            answer["note"] = f"CPU timings ({self._gpu()}); kernels for Hopper are timed on a Hopper GPU"
        return answer

    def explain_performance(self, graph: str, match: str, ms: float | None = None, candidate: str | None = None,
                            arch: str | None = None) -> dict:
        """Where a kernel for a match sits on the roofline of the device profile: its FLOPs and
        minimum bytes, arithmetic intensity, the ridge point, the bound (memory or compute), the
        roofline time, and — given a time (ms, or a verified candidate's) — the fraction of the
        roofline achieved. Hardware counters (ncu) need a Hopper GPU."""
        arch = self._arch(arch)
        task = engine.task(graph, match, arch=arch, registry_dir=self.registry_dir)
        profile = engine.device().get("profile", {})
        call = task["call"]
        flops, bytes_ = float(call.get("flops") or 0), float(call.get("min_bytes") or 0)
        dtype = task["match"].get("dtype", "")
        peak = profile.get("bf16_flops") if dtype in ("bfloat16", "float16") else profile.get("tf32_flops" if task[
            "precision"] == "tf32" else "fp32_flops")
        bandwidth = profile.get("hbm_bytes_per_s")
        intensity = flops / bytes_ if bytes_ else None
        ridge = peak / bandwidth if peak and bandwidth else None
        roofline_s = max(flops / peak if peak else 0.0, bytes_ / bandwidth if bandwidth else 0.0)
        if ms is None and candidate is not None and self.candidates.get(candidate, {}).get("last_gates"):
            ms = (self.candidates[candidate]["last_gates"].get("timing") or {}).get("ms")
        answer = _ok(device=profile.get("name"), flops=flops, min_bytes=bytes_, arithmetic_intensity=intensity,
                     ridge_point=ridge, bound=("compute" if intensity and ridge and intensity >= ridge else "memory"),
                     peak_flops=peak, peak_bytes_per_s=bandwidth, roofline_ms=roofline_s * 1e3)
        if ms:
            answer["measured_ms"] = ms
            answer["fraction_of_roofline"] = (roofline_s * 1e3) / ms if ms > 0 else None
            answer["achieved_flops"] = flops / (ms * 1e-3) if ms > 0 else None
            answer["achieved_bytes_per_s"] = bytes_ / (ms * 1e-3) if ms > 0 else None
        why = self._gpu()
        answer["counters"] = (_needs_gpu(f"{why}; hardware counters (ncu: tensor pipe, DRAM throughput, stalls) are "
                                         f"read on the device") if why else
                              {"status": "ok", "how": "ncu --set full on the kernel's standalone runner"})
        if ms and (self._gpu() is not None) and arch != "host":
            answer["note"] = "the roofline is the Hopper device profile's; a CPU time is not comparable to it"
        return answer


def _speed_words(timing: dict | None) -> str:
    timing = timing or {}
    ms, base, speedup = timing.get("ms"), timing.get("baseline_ms"), timing.get("speedup")
    if not isinstance(ms, (int, float)) or not isinstance(base, (int, float)):
        return "not timed"
    return f"{ms:.4g} ms vs PyTorch {base:.4g} ms, {speedup:.3g}x" if isinstance(speedup, (int, float)) else \
        f"{ms:.4g} ms vs PyTorch {base:.4g} ms"


def _choices() -> dict[str, tuple[str, ...]]:
    """The values the enumerated parameters take, from the engine's tables (dtypes: the floating
    ones a model runs in; precision modes) and the registry's architectures."""
    floating = tuple(e["name"] for e in engine_tables.tables()["dtypes"] if e.get("floating"))
    return {"dtype": floating, "precision": engine_tables.precisions(), "arch": ARCHS}


def _answer(payload: dict) -> Any:
    """A tool's answer: the object itself when its status is ok (validated against the tool's
    output schema), else a result with isError set that carries the same object."""
    if payload.get("status") == "ok":
        return payload
    text = json.dumps(payload, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=payload, is_error=True)


def tool_function(tools: FactTools, name: str, choices: dict[str, tuple[str, ...]] | None = None):
    """The MCP tool for FactTools.<name>: described parameters (enums where the values are a
    table's), one clear line for a value outside them, engine and argument errors as "error"
    answers, and isError on every answer whose status is not ok."""
    method = getattr(tools, name)
    choices = _choices() if choices is None else choices
    signature = inspect.signature(method)

    def tool(*args, **kwargs):
        bound = signature.bind_partial(*args, **kwargs)
        for parameter, value in bound.arguments.items():
            allowed = choices.get(parameter)
            if allowed and value is not None and value not in allowed:
                return _answer(_error(f"{parameter} {value!r} is not one of: {', '.join(allowed)}"))
        try:
            return _answer(method(*args, **kwargs))
        except engine.AgentEngineError as error:
            return _answer(_error(f"engine: {error}"))
        except (KeyError, ValueError, OSError) as error:
            return _answer(_error(f"{type(error).__name__}: {error}"))

    parameters = []
    for parameter in signature.parameters.values():
        described = mcp_schema.PARAMETERS.get(parameter.name, "")
        if parameter.name == "arch":
            described += f" Default here: {tools.default_arch}."
        extra = None
        if parameter.name in choices:  # an omitted (None) value takes the default the description states
            extra = {"enum": list(choices[parameter.name]) + ([None] if parameter.default is None else [])}
        field = Field(description=described.strip() or None, json_schema_extra=extra)
        parameters.append(parameter.replace(annotation=Annotated[parameter.annotation, field]))
    output = mcp_schema.OUTPUTS[name]
    tool.__name__ = name
    tool.__doc__ = method.__doc__
    tool.__signature__ = signature.replace(parameters=parameters,
                                           return_annotation=Annotated[CallToolResult, output])
    tool.__annotations__ = {**{p.name: p.annotation for p in parameters},
                            "return": Annotated[CallToolResult, output]}
    return tool


def build_server(tools: FactTools) -> MCPServer:
    has = "has" if tools.default_arch == "sm_90a" else "has no"
    server = MCPServer("fact", instructions=INSTRUCTIONS.format(default_arch=tools.default_arch, has=has),
                       version=_version())
    choices = _choices()
    for name in TOOL_NAMES:
        server.add_tool(tool_function(tools, name, choices), name=name, structured_output=True)
    return server


TOOL_NAMES = ("device_status", "capture_model", "inspect_graph", "discover", "search_registry", "show_registry_entry",
              "get_task", "retrieve_examples", "realize_from_template", "realize_from_source", "build", "verify",
              "tune", "register_kernel", "compose", "benchmark", "explain_performance")


def _version() -> str:
    try:
        from fact import _engine
        return _engine.engine_library().version()
    except Exception:  # noqa: BLE001 - the server still starts; tools then say what is missing
        return "unknown"


def describe_tools(tools: FactTools, width: int = 100) -> str:
    """`fact mcp --list-tools`: every tool with its whole description, wrapped."""
    blocks = []
    for name in TOOL_NAMES:
        doc = inspect.cleandoc(getattr(tools, name).__doc__ or "")
        text = " ".join(doc.split())
        blocks.append(name + "\n" + textwrap.fill(text, width=width, initial_indent="    ", subsequent_indent="    "))
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fact mcp")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--registry-dir", default=None)
    parser.add_argument("--list-tools", action="store_true")
    args = parser.parse_args(argv)
    tools = FactTools(args.work_dir, args.registry_dir)
    if args.list_tools:
        width = shutil.get_terminal_size((100, 24)).columns
        print(describe_tools(tools, width=max(60, min(width, 120))), end="")
        return 0
    build_server(tools).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
