"""`fact mcp` driven by a real MCP client (the official SDK's stdio client), as an agent would:
list the tools, capture a model file, inspect and discover (each match classified against the
registry), get the task and retrieve examples for the NEW match, realize from agent-supplied
source and from a built-in template with parameters, build both (compile only; the template a
real sm_90a CUTLASS kernel when nvcc is here); a broken source comes back as a structured
diagnostic with file and line; the agent's kernel passes the gates and enters the registry;
GPU-only tools answer needs_gpu with the reason."""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

from agent_support import engine_or_skip, kernel, write_model

pytestmark = pytest.mark.slow


def server_parameters(work):
    from mcp.client.stdio import StdioServerParameters
    from fact import _engine
    env = {k: os.environ[k] for k in ("FACT_CACHE_DIR", "FACT_REGISTRY_DIR", "FACT_ENGINE", "FACT_SOURCE_DIR")
           if k in os.environ}
    env["FACT_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return StdioServerParameters(command=str(_engine.engine_path()), args=["mcp", "--work-dir", str(work)], env=env)


def test_an_agent_drives_capture_to_build_over_stdio(agent_env, tmp_path):
    engine_or_skip()
    from mcp import Client
    from fact.agent import engine

    model = write_model(tmp_path)
    compile_unavailable = engine.device().get("compile_unavailable")
    transcript = []

    async def session():
        async with Client(server_parameters(tmp_path / "work"), read_timeout_seconds=900) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"capture_model", "inspect_graph", "discover", "search_registry", "retrieve_examples",
                    "realize_from_template", "realize_from_source", "build", "verify", "tune", "compose",
                    "benchmark", "explain_performance", "register_kernel"} <= tools

            async def call(name, **arguments):
                result = await client.call_tool(name, arguments)
                assert not result.is_error, result.content
                transcript.append((name, arguments, result.structured_content))
                return result.structured_content

            graph = (await call("capture_model", model_file=f"{model}:AttentionProj"))["graph"]
            inspected = await call("inspect_graph", graph=graph)
            assert [n["target"] for n in inspected["nodes"]] == ["aten.scaled_dot_product_attention.default",
                                                                 "aten.linear.default"]
            found = await call("discover", graph=graph, arch="host")
            by_rule = {m["rule"]: m for m in found["matches"]}
            assert by_rule["attention_causal"]["classification"] == "NEW"
            assert by_rule["gemm_bias"]["classification"] == "ADAPT"
            assert "class: REUSE = an entry of the pattern registry" in found["table"]
            label = by_rule["attention_causal"]["label"]
            task = await call("get_task", graph=graph, match=label, arch="host")
            assert task["semantics"] == ["scaled_dot_product_attention = aten.scaled_dot_product_attention.default"
                                         "(q, k, v, None, 0.0, True)"]
            assert "FactSubgraphArgs" in task["abi"] and task["tolerance"] == 1e-5
            examples = await call("retrieve_examples", graph=graph, match=label, arch="sm_90a", k=3)
            assert any("fmha" in e["id"] for e in examples["examples"]), examples

            broken = await call("realize_from_source", source=kernel("attention_broken.cpp"), arch="host")
            failed = await call("build", candidate=broken["candidate"])
            assert failed["status"] == "failed"
            [error] = [d for d in failed["diagnostics"] if d["severity"] == "error"]
            assert (error["file"], error["line"]) == ("kernel.cpp", 6) and "attend_causal" in error["message"]

            good = await call("realize_from_source", source=kernel("attention_correct.cpp"), arch="host")
            assert (await call("build", candidate=good["candidate"]))["status"] == "ok"
            verdict = await call("verify", candidate=good["candidate"], graph=graph, match=label)
            assert verdict["passed"] and verdict["timing"]["baseline_ms"] > 0
            stored = await call("register_kernel", candidate=good["candidate"], graph=graph, match=label,
                                author="mcp test agent", model="test-model")
            assert stored["registered"]
            again = await call("discover", graph=graph, arch="host")
            assert {m["rule"]: m for m in again["matches"]}["attention_causal"]["classification"] == "REUSE"
            entries = await call("search_registry", query="attention", include_builtin=False)
            assert entries["entries"][0]["provenance"]["author"] == "mcp test agent"

            explained = await call("explain_performance", graph=graph, match=label, candidate=good["candidate"])
            assert explained["bound"] in ("memory", "compute") and explained["counters"]["status"] in ("needs_gpu", "ok")
            if engine.device().get("gpu_unavailable"):
                tuned = await call("tune", graph=graph, match=by_rule["gemm_bias"]["label"])
                assert tuned["status"] == "needs_gpu" and tuned["message"].startswith("needs a Hopper GPU: ")

            # A built-in template with parameters, compiled as FACT compiles its kernels.
            bf16 = (await call("capture_model", model_file=f"{model}:AttentionProj", dtype="bfloat16"))["graph"]
            gemm_label = {m["rule"]: m for m in (await call("discover", graph=bf16))["matches"]}["gemm_bias"]["label"]
            nothing = await call("realize_from_template", graph=bf16, match=gemm_label, params={"no_such": 1})
            assert nothing["status"] == "failed" and nothing["configs"]
            chosen = nothing["configs"][0]
            realized = await call("realize_from_template", graph=bf16, match=gemm_label, config=chosen)
            assert realized["name"] == chosen and realized["source_file"].endswith(".cu")
            if compile_unavailable is None:
                built = await call("build", candidate=realized["candidate"])
                assert built["status"] == "ok", built
            return True

    assert asyncio.run(session())
    names = [name for name, _, _ in transcript]
    assert names[:3] == ["capture_model", "inspect_graph", "discover"]
    keep = os.environ.get("FACT_AGENT_TRANSCRIPT_DIR")
    if keep:  # docs/agent.md quotes it
        import json
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, "mcp_session.json"), "w") as out:
            json.dump([{"tool": n, "arguments": a, "result": r} for n, a, r in transcript], out, indent=1)
