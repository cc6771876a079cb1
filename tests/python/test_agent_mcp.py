"""`fact mcp` driven by a real MCP client (the official SDK's stdio client), as an agent would:
list the tools, capture a model file, inspect and discover (each match classified against the
registry), get the task and retrieve examples for the NEW match, realize from agent-supplied
source and from a built-in template with parameters, build both (compile only; the template a
real sm_90a CUTLASS kernel when nvcc is here); a broken source comes back as a structured
diagnostic with file and line; the agent's kernel passes the gates and enters the registry;
GPU-only tools answer needs_gpu with the reason. Every answer that is not "ok" sets the
protocol's isError flag; candidates survive a server restart on the same work folder; a kernel
slower than PyTorch is refused by the registry."""
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
                answer = result.structured_content
                # isError is set exactly when the answer's status is not "ok"
                assert result.is_error == (answer["status"] != "ok"), (result.is_error, answer)
                transcript.append((name, arguments, answer))
                return answer

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
            assert stored["registered"], stored  # the gates say why a kernel was refused
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


def test_errors_restarts_and_a_slow_kernel_over_stdio(agent_env, tmp_path):
    """A real MCP client session against `fact mcp`: a failing tool sets isError (and a bad dtype
    answers one line naming the allowed values, read from the engine's tables); parameters carry
    descriptions and enums, every tool an output schema; get_task hands over the header text and
    codes; a cached build says so; a candidate survives a restart of the server on the same work
    folder; a correct kernel slower than PyTorch is refused by the registry."""
    engine_or_skip()
    from mcp import Client
    from fact import engine_tables
    from fact.agent.mcp_schema import PARAMETERS

    model = write_model(tmp_path)
    work = tmp_path / "work"
    floating = [e["name"] for e in engine_tables.tables()["dtypes"] if e.get("floating")]

    async def first_session():
        async with Client(server_parameters(work), read_timeout_seconds=900) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert all(t.output_schema and "status" in t.output_schema["properties"] for t in listed.values())
            dtype = listed["capture_model"].input_schema["properties"]["dtype"]
            assert dtype["enum"] == floating and dtype["description"] == PARAMETERS["dtype"]
            arch_docs = {listed[n].input_schema["properties"]["arch"]["description"]
                         for n in ("discover", "get_task", "retrieve_examples", "realize_from_source")}
            assert len(arch_docs) == 1 and "Default here: host" in arch_docs.pop()

            bad = await client.call_tool("capture_model", {"model_file": f"{model}:TinyAttention", "dtype": "int4"})
            assert bad.is_error and bad.structured_content["status"] == "error"
            message = bad.structured_content["error"]
            assert message == "dtype 'int4' is not one of: " + ", ".join(floating), message
            unknown = await client.call_tool("build", {"candidate": "s9"})
            assert unknown.is_error and "no candidate 's9'" in unknown.structured_content["error"]

            captured = await client.call_tool("capture_model", {"model_file": f"{model}:TinyAttention"})
            assert not captured.is_error
            graph = captured.structured_content["graph"]
            task = (await client.call_tool("get_task", {"graph": graph, "match": "1"})).structured_content
            assert task["arch"] == "host" and task["include"] == '#include "fact/runtime/fact_subgraph_abi.h"'
            texts = "\n".join(h["text"] for h in task["headers"])
            assert "typedef struct FactSubgraphArgs" in texts and "FACT_OK" in texts
            assert task["dtype_codes"]["float32"] == 1 and task["return_codes"]["FACT_OK"] == 0

            good = (await client.call_tool("realize_from_source",
                                           {"source": kernel("attention_correct.cpp")})).structured_content
            assert good["candidate"] == "s1"
            assert not (await client.call_tool("build", {"candidate": "s1"})).is_error
            again = (await client.call_tool("build", {"candidate": "s1"})).structured_content
            assert again["cached"] is True and again["build"] == "cached" and "nothing was compiled" in again["note"]
            return graph

    async def second_session(graph):
        async with Client(server_parameters(work), read_timeout_seconds=900) as client:
            # the same work folder: the first server's candidate is known
            built = await client.call_tool("build", {"candidate": "s1"})
            assert not built.is_error and built.structured_content["cached"], built.structured_content
            slow = (await client.call_tool("realize_from_source",
                                           {"source": kernel("attention_slow.cpp")})).structured_content
            assert slow["candidate"] == "s2"
            verdict = await client.call_tool("verify", {"candidate": "s2", "graph": graph, "match": "1"})
            assert not verdict.is_error and verdict.structured_content["passed"]
            assert verdict.structured_content["faster_than_pytorch"] is False
            assert "slower than PyTorch" in verdict.structured_content["speed"]
            refused = await client.call_tool("register_kernel", {"candidate": "s2", "graph": graph, "match": "1"})
            assert refused.is_error, refused.structured_content
            assert refused.structured_content["registered"] is False
            assert "not faster than PyTorch" in refused.structured_content["refused"]
            listing = (await client.call_tool("search_registry", {"include_builtin": False})).structured_content
            assert listing["entries"] == []
            found = (await client.call_tool("discover", {"graph": graph})).structured_content
            assert found["matches"][0]["classification"] == "NEW"
            return True

    graph = asyncio.run(first_session())
    assert asyncio.run(second_session(graph))
    assert (work / "candidates" / "s1" / "candidate.json").is_file()


def test_list_tools_prints_whole_descriptions(agent_env, tmp_path):
    engine_or_skip()
    import subprocess
    from fact import _engine
    from fact.agent.mcp_server import TOOL_NAMES, FactTools
    listed = subprocess.run([str(_engine.engine_path()), "mcp", "--work-dir", str(tmp_path), "--list-tools"],
                            capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert listed.returncode == 0, listed.stderr
    text = " ".join(listed.stdout.split())
    tools = FactTools(tmp_path)
    for name in TOOL_NAMES:
        whole = " ".join((getattr(tools, name).__doc__ or "").split())
        assert whole and whole in text, name
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80
