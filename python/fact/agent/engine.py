"""The engine's agent API (include/fact/engine/c_api.h, agent.hpp) from Python: JSON in, JSON
out, in process through libfact. Every function returns the response document and raises
AgentEngineError with the engine's one-line error when the engine refused the request."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fact import _engine


class AgentEngineError(RuntimeError):
    """The engine answered {"status": "error", "error": ...}."""


def _call(function: str, request: dict) -> dict:
    code, response = _engine.engine_library().call_json(function, request)
    if code != 0 or response.get("status") == "error":
        raise AgentEngineError(response.get("error") or f"{function} failed ({code})")
    return response


def _settings(precision: str | None, arch: str, registry_dir: str | Path | None) -> dict:
    request: dict[str, Any] = {"precision": precision or "", "arch": arch}
    if registry_dir is not None:
        request["registry_dir"] = str(registry_dir)
    return request


def discover(graph: str | Path, *, precision: str | None = None, arch: str = "sm_90a",
             registry_dir: str | Path | None = None) -> dict:
    """fact.discovery/1 with "table" (the report) and "registry" ({dir, version, arch})."""
    return _call("fact_engine_discover", {"graph": str(graph), **_settings(precision, arch, registry_dir)})


def task(graph: str | Path, match: str, *, precision: str | None = None, arch: str = "sm_90a",
         registry_dir: str | Path | None = None) -> dict:
    """The agent task (fact.agent.task/1) for one match (its label "3", or a rule / pattern name)."""
    return _call("fact_engine_agent_task", {"graph": str(graph), "match": str(match),
                                            **_settings(precision, arch, registry_dir)})


def fragment_task(fragment: dict, rule: str, dtype: str, precision: str = "") -> dict:
    """{"semantics", "call"} for a fragment alone (a registry entry's reference semantics)."""
    return _call("fact_engine_agent_task", {"fragment": fragment, "rule": rule, "dtype": dtype,
                                            "precision": precision})


def build(source: str, *, device: str = "host", kind: str = "subgraph", name: str = "agent_kernel",
          file_name: str = "", timeout_seconds: int = 600) -> dict:
    """Builds a kernel source (fact_engine_build): status, library, entry, diagnostics."""
    return _call("fact_engine_build", {"source": source, "device": device, "kind": kind, "name": name,
                                       "file_name": file_name, "timeout_seconds": int(timeout_seconds)})


def realize(problem: dict, out_dir: str | Path, *, precision: str = "native", space: str = "default",
            config: str | None = None, params: dict | None = None, compile: bool = False) -> dict:
    """A kernel from a built-in template (fact_engine_realize)."""
    request: dict[str, Any] = {"problem": problem, "precision": precision, "space": space,
                               "compile": bool(compile), "out_dir": str(out_dir)}
    if config:
        request["config"] = config
    if params:
        request["params"] = params
    return _call("fact_engine_realize", request)


def device(device_profile: str | Path | None = None) -> dict:
    """{"gpu_unavailable": reason|None, "compile_unavailable": reason|None, "profile": {...}}."""
    request = {"device_profile": str(device_profile)} if device_profile else {}
    return _call("fact_engine_device", request)


def registry(op: str, *, dir: str | Path | None = None, **fields: Any) -> dict:
    """The registry (fact_registry): op list | show | add | check | remove | export | lookup."""
    request = {"op": op, **{k: v for k, v in fields.items() if v is not None}}
    if dir is not None:
        request["dir"] = str(dir)
    return _call("fact_registry", request)
