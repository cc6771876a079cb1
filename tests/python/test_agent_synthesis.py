"""The LLM synthesis loop (docs/agent.md) against a chat-completions server on
loopback replaying scripted replies: malformed answers, a refusal, a timeout, a source that does
not compile (its error is in the next request), one that computes the wrong function, one of
each harness exploit (each rejected by the gate named for it), a reply without code, and a
correct kernel, which enters the registry with its provenance and is then REUSEd by discovery,
planned by the engine and composed (and verified) on the CPU path. Without an endpoint NEW
matches are left to PyTorch, and said so."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from agent_support import (EXPLOITS, ScriptedLLM, capture, code_reply, engine_or_skip, kernel, reply,
                           write_model)

pytestmark = pytest.mark.slow


@pytest.fixture
def graph(agent_env, tmp_path):
    engine_or_skip()
    return capture(write_model(tmp_path), "TinyAttention", tmp_path / "graph.json")


def test_the_loop_rejects_every_bad_reply_and_registers_the_correct_kernel(graph, agent_env, tmp_path):
    from fact.agent import engine, synthesize
    from fact.agent.llm import LLMConfig

    script = [
        {"raw": "<html>502 Bad Gateway</html>"},                        # 1 malformed
        {**reply(""), "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": None,
                                               "refusal": "I can't help with that."}}]},  # 2 refusal
        {"sleep": 3.0, "then": code_reply(kernel("attention_correct.cpp"))},             # 3 timeout
        code_reply(kernel("attention_broken.cpp")),                                      # 4 does not compile
        code_reply(kernel("attention_wrong.cpp")),                                       # 5 wrong function
        *[code_reply(kernel(name), "This one is faster.") for name in EXPLOITS],          # 6-11 exploits
        reply("I would start with a tiled implementation and online softmax."),          # 12 no code
        code_reply(kernel("attention_correct.cpp")),                                     # 13 correct
    ]
    with ScriptedLLM(script) as llm:
        config = LLMConfig(base_url=llm.base_url, model="scripted-coder", api_key="sk-test", timeout=1.5,
                           source="test")
        report = synthesize.run(graph, arch="host", precision="strict", config=config,
                                budget=synthesize.Budget(attempts=13, seconds=900, tokens=10**6, gate_seconds=120),
                                out_dir=tmp_path / "agent")
        requests = llm.requests

    [result] = report["matches"]
    outcomes = [(a["outcome"], a["failed_check"]) for a in result["attempts"]]
    expected = [("llm_error", ""), ("refusal", ""), ("llm_error", ""), ("compile_error", ""),
                ("gate_failed", "float64_reference"),
                *[("gate_failed", check) for check in EXPLOITS.values()],
                ("no_code", ""), ("accepted", "")]
    assert outcomes == expected, json.dumps(result["attempts"], indent=1)
    assert "malformed" in result["attempts"][0]["detail"]
    assert "timeout" in result["attempts"][2]["detail"]
    assert result["status"] == "registered", result["reason"]

    # The compile error is in the very next request, with its file and line.
    broken = result["attempts"][3]
    assert "attend_causal" in broken["detail"]
    next_request = llm_user_text(requests[4])
    assert "kernel.cpp:6:" in next_request and "'attend_causal' was not declared" in next_request
    # A gate's failure is fed back with the check's name and where.
    assert "float64_reference" in llm_user_text(requests[5]) and "worst element" in llm_user_text(requests[5])
    # Every request carries the task: the reference semantics, the ABI and the key.
    first = llm_user_text(requests[0])
    assert "aten.scaled_dot_product_attention.default" in first and "FactSubgraphArgs" in first
    assert all(r["authorization"] == "Bearer sk-test" for r in requests)

    # Every attempt is logged.
    for attempt in result["attempts"]:
        logged = json.loads(open(attempt["log"]).read())
        assert logged["attempt"] == attempt["number"] and logged["request"]["messages"]
    assert (tmp_path / "agent" / "match-1" / "transcript.md").read_text().count("### attempt") >= 13

    # The registry holds the kernel with its provenance; discovery now says REUSE.
    entry = engine.registry("show", id=result["entry"])["entry"]
    provenance = entry["provenance"]
    assert (provenance["model"], provenance["endpoint"], provenance["attempt"]) == ("scripted-coder", config.base_url, 13)
    assert len(provenance["prompt_sha256"]) == 64 and provenance["log"].endswith("match-1")
    assert entry["origin"] == "agent" and entry["arch"] == "host"
    assert entry["gates"]["passed"] and {c["name"] for c in entry["gates"]["checks"]} >= set(EXPLOITS.values())
    assert entry["verified"][0]["rel_err"] <= entry["verified"][0]["tolerance"]
    assert entry["tuned"][0]["ms"] > 0 and entry["tuned"][0]["baseline"]["ms"] > 0
    discovery = engine.discover(graph, arch="host")
    [match] = discovery["matches"]
    assert match["classification"] == "REUSE" and match["registry_entry"] == result["entry"]
    assert "verified on exactly this subgraph" in match["classification_reason"]

    # fact registry show says where it came from.
    shown = subprocess.run([os.environ.get("FACT_ENGINE", "fact"), "registry", "show", result["entry"]],
                           capture_output=True, text=True)
    if shown.returncode == 0:
        assert "model: scripted-coder" in shown.stdout and "attempt: 13" in shown.stdout

    # The plan takes it, and the composed module runs it (verified against the subgraph).
    import fact
    from agent_support import MODEL_SOURCE  # noqa: F401
    namespace: dict = {}
    exec(compile((tmp_path / "tiny_models.py").read_text(), "tiny_models", "exec"), namespace)
    model, inputs = namespace["TinyAttention"](), namespace["get_inputs"]()
    # This checks planning, composition and verification. The kernel is faster than PyTorch's
    # SDPA (the gates timed it), but at this size a composed call's own overhead on the CPU path
    # can exceed the whole subgraph's time, so the per-replacement speed guard, which would then
    # rightly leave it to PyTorch, is turned off here; the report says so.
    composed = fact.optimize(model, inputs, precision="strict", work_dir=tmp_path / "compose", remainder="eager",
                             replacement_guard=False)
    assert len(composed.fact_report.composed) == 1, composed.fact_report.to_json()["left_to_pytorch"]
    assert any(note.startswith("replacement_guard off: the host kernels were not timed")
               for note in composed.fact_report.notes), composed.fact_report.notes
    [replacement] = composed.fact_report.composed
    assert replacement.verified and replacement.implementation == "host kernels"
    torch.testing.assert_close(composed(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)
    keep_transcript(tmp_path / "agent", "synthesis")


def keep_transcript(folder, name: str) -> None:
    """$FACT_AGENT_TRANSCRIPT_DIR set: keep the run's logs there (docs/agent.md quotes one)."""
    import shutil
    keep = os.environ.get("FACT_AGENT_TRANSCRIPT_DIR")
    if keep:
        shutil.copytree(folder, os.path.join(keep, name), dirs_exist_ok=True)


def llm_user_text(request: dict) -> str:
    return "\n".join(m["content"] or "" for m in request["body"]["messages"] if m["role"] == "user")


def test_without_an_endpoint_new_matches_are_left_to_pytorch(graph, agent_env, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "fact.agent.synthesize", "--graph", str(graph), "--arch", "host",
                           "-o", str(tmp_path / "agent")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "agent" / "agent_report.json").read_text())
    [match] = report["matches"]
    assert match["status"] == "left_to_pytorch"
    assert "no LLM endpoint configured" in match["reason"] and "NEW" in match["reason"]
    assert "left to PyTorch" in proc.stdout


def test_budgets_bound_the_loop(graph, agent_env, tmp_path):
    from fact.agent import synthesize
    from fact.agent.llm import LLMConfig

    with ScriptedLLM([reply("thinking...", prompt=5000, completion=5000)] * 4) as llm:
        config = LLMConfig(base_url=llm.base_url, model="m", timeout=5, source="test")
        report = synthesize.run(graph, arch="host", config=config, out_dir=tmp_path / "agent",
                                budget=synthesize.Budget(attempts=4, seconds=600, tokens=15000))
    [match] = report["matches"]
    assert match["status"] == "failed" and "token budget" in match["reason"]
    assert len(match["attempts"]) == 2  # 10k tokens each: the third would exceed 15k
    with ScriptedLLM([{"status": 500, "body": "overloaded"}] * 3) as llm:
        config = LLMConfig(base_url=llm.base_url, model="m", timeout=5, source="test")
        report = synthesize.run(graph, arch="host", config=config, out_dir=tmp_path / "agent2",
                                budget=synthesize.Budget(attempts=3))
    [match] = report["matches"]
    assert [a["outcome"] for a in match["attempts"]] == ["llm_error"] * 3
    assert "HTTP 500" in match["attempts"][0]["detail"] and match["status"] == "failed"


def test_fact_optimize_agent_composes_the_agent_kernel(agent_env, tmp_path):
    """`fact optimize --agent` end to end on the CPU path: the NEW match goes to the endpoint,
    the kernel passes the gates, enters the registry, the plan REUSEs it and the package
    composes it (verified against the subgraph it replaces)."""
    engine_or_skip()
    from fact import _engine
    model = write_model(tmp_path)
    with ScriptedLLM([code_reply(kernel("attention_correct.cpp"))]) as llm:
        proc = subprocess.run([str(_engine.engine_path()), "optimize", f"{model}:TinyAttention", "-o",
                               str(tmp_path / "out"), "--agent", "--agent-endpoint", llm.base_url,
                               "--agent-model", "scripted"], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 of 1 match(es) realized by agent kernels that passed every gate" in proc.stdout
    assert "REUSE attention_causal: entry attention_causal/float32/host/" in proc.stdout
    assert "1 replacement(s) composed" in proc.stdout
    report = json.loads((tmp_path / "out" / "fact_tinyattention" / "report.json").read_text())
    [composed] = report["composed"]
    assert composed["verified"] and composed["implementation"] == "host kernels"


def test_a_kernel_slower_than_pytorch_costs_an_attempt(graph, agent_env, tmp_path):
    """A kernel that passes every gate but is slower than PyTorch is not registered: the attempt
    is too_slow, the next request gives both times, and a faster kernel is then accepted."""
    from fact.agent import synthesize
    from fact.agent.llm import LLMConfig

    script = [code_reply(kernel("attention_slow.cpp")), code_reply(kernel("attention_correct.cpp"))]
    with ScriptedLLM(script) as llm:
        config = LLMConfig(base_url=llm.base_url, model="scripted-coder", timeout=30, source="test")
        report = synthesize.run(graph, arch="host", precision="strict", config=config, out_dir=tmp_path / "agent",
                                budget=synthesize.Budget(attempts=2, seconds=900, tokens=10**6, gate_seconds=120))
        second = llm_user_text(llm.requests[1])
    [result] = report["matches"]
    assert [(a["outcome"], a["failed_check"]) for a in result["attempts"]] == [("too_slow", "speed"), ("accepted", "")]
    assert "passed every gate but is slower than PyTorch" in second and " ms vs " in second
    assert result["status"] == "registered" and result["timing"]["speedup"] >= 1.0
