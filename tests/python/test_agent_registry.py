"""`fact registry list | show | add | remove | export | import`: built-in entries come
with the engine; a kernel entry enters only through the gates (run again on add and on import,
whatever record the file carries); the registry is versioned; `show` says where a kernel came
from; entries for a Hopper GPU cannot be verified, hence not added, without one."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from agent_support import capture, engine_or_skip, kernel, write_model

pytestmark = pytest.mark.slow


def fact(*args: str) -> subprocess.CompletedProcess:
    from fact import _engine
    return subprocess.run([str(_engine.engine_path()), "registry", *args], capture_output=True, text=True,
                          env=dict(os.environ))


@pytest.fixture
def entry(agent_env, tmp_path):
    engine_or_skip()
    from fact.agent import engine
    graph = capture(write_model(tmp_path), "TinyAttention", tmp_path / "graph.json")
    task = engine.task(graph, "1", arch="host")

    def make(source: str, arch: str = "host") -> dict:
        return {"rule": task["match"]["rule"], "pattern": task["match"]["pattern"], "dtype": "float32", "arch": arch,
                "origin": "user",
                "source": {"text": source, "language": "c++" if arch == "host" else "cuda",
                           "device": "host" if arch == "host" else "cuda", "abi": "subgraph", "entry": "fact_entry"},
                "reference": {"fragment": task["semantics"]["fragment"], "precision": "strict"},
                "provenance": {"by": "user", "author": "registry test"},
                # a record claiming success is not trusted: the gates run here again
                "gates": {"passed": True, "source_sha256": "0" * 64, "semantics_hash": task["semantics"]["hash"]}}
    make.graph = graph
    return make


def test_builtin_entries_are_listed_with_their_template(agent_env):
    engine_or_skip()
    listing = fact("list")
    assert listing.returncode == 0, listing.stderr
    assert "builtin/gemm_epilogue/bfloat16/sm_90a" in listing.stdout and "template gemm_epilogue (built in)" in listing.stdout
    shown = fact("show", "builtin/gemm_epilogue/float32/sm_90a")
    assert "realizer gemm_f32_strict" in shown.stdout and "built into fact" in shown.stdout
    assert fact("remove", "builtin/gemm_epilogue/float32/sm_90a").returncode != 0


def test_add_runs_the_gates_and_show_says_where_it_came_from(entry, agent_env, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(entry(kernel("exploit_mutates_inputs.cpp"))))
    refused = fact("add", str(bad))
    assert refused.returncode != 0
    assert "rejected by the gate inputs_unchanged" in refused.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps(entry(kernel("attention_correct.cpp"))))
    added = fact("add", str(good))
    assert added.returncode == 0, added.stderr
    assert "passed every gate here" in added.stdout and "registry version 1" in added.stdout
    listing = fact("list", "--no-builtin", "--json")
    [stored] = json.loads(listing.stdout)["entries"]
    assert stored["gates"]["passed"] and stored["gates"]["source_sha256"] != "0" * 64
    shown = fact("show", stored["id"][:24])
    assert "author: registry test" in shown.stdout and "gates     passed" in shown.stdout
    assert "speed     at least as fast as PyTorch" in shown.stdout
    assert "scaled_dot_product_attention = aten.scaled_dot_product_attention.default" in shown.stdout

    exported = tmp_path / "export.json"
    assert fact("export", "-o", str(exported)).returncode == 0
    assert fact("remove", stored["id"]).returncode == 0
    assert json.loads(fact("list", "--no-builtin", "--json").stdout)["entries"] == []
    document = json.loads(exported.read_text())
    # An imported kernel is verified again: a tampered one is refused, an honest one comes back.
    tampered = json.loads(json.dumps(document))
    tampered["entries"][0]["source"]["text"] = kernel("attention_wrong.cpp")
    (tmp_path / "tampered.json").write_text(json.dumps(tampered))
    rejected = fact("import", str(tmp_path / "tampered.json"))
    assert rejected.returncode != 0 and "float64_reference" in rejected.stderr
    imported = fact("import", str(exported))
    assert imported.returncode == 0, imported.stderr
    after = json.loads(fact("list", "--no-builtin", "--json").stdout)
    assert [e["id"] for e in after["entries"]] == [stored["id"]] and after["version"] == 3


def test_a_hopper_kernel_needs_a_hopper_gpu_to_enter(entry, agent_env, tmp_path):
    from fact.agent import engine
    if engine.device().get("gpu_unavailable") is None:
        pytest.skip("a Hopper GPU is here: the gates would run")
    path = tmp_path / "cuda.json"
    path.write_text(json.dumps(entry(kernel("attention_correct.cpp"), arch="sm_90a")))
    refused = fact("add", str(path))
    assert refused.returncode != 0 and "needs a Hopper GPU" in refused.stderr


def test_a_kernel_slower_than_pytorch_is_refused_unless_overridden(entry, agent_env, tmp_path):
    """The registry holds vetted kernels: one that passes every gate but is timed slower than
    PyTorch's run of its subgraph is refused; an entry may enter anyway only with a written
    speed_override, which discovery names wherever it is used."""
    from fact.agent import engine
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(entry(kernel("attention_slow.cpp"))))
    refused = fact("add", str(slow))
    assert refused.returncode != 0
    assert "not faster than PyTorch" in refused.stderr and "slower than PyTorch on host CPU" in refused.stderr
    assert json.loads(fact("list", "--no-builtin", "--json").stdout)["entries"] == []

    # An override must give a reason; with one, the entry is stored and says so when used.
    overridden = entry(kernel("attention_slow.cpp"))
    overridden["speed_override"] = {}
    slow.write_text(json.dumps(overridden))
    assert "speed_override" in fact("add", str(slow)).stderr
    overridden["speed_override"] = {"reason": "registry test: classification of a stored kernel"}
    slow.write_text(json.dumps(overridden))
    added = fact("add", str(slow))
    assert added.returncode == 0, added.stderr
    [stored] = json.loads(fact("list", "--no-builtin", "--json").stdout)["entries"]
    assert stored["tuned"][-1]["speedup"] < 1.0 and stored["tuned"][-1]["device"].startswith("host CPU")
    shown = fact("show", stored["id"]).stdout
    assert "speed     used under a speed override (not timed faster than PyTorch): registry test" in shown
    found = engine.discover(entry.graph, arch="host")
    [match] = found["matches"]
    assert match["classification"] == "REUSE"
    assert "used under a speed override (not timed faster than PyTorch): registry test" in \
        match["classification_reason"]


def test_a_stored_slow_entry_is_never_planned_nor_composed(entry, agent_env, tmp_path):
    """An entry stored before the speed rule (written into registry.json directly) with a timing
    record slower than PyTorch is not classified, not planned, and the executor refuses a plan
    that names one; the CPU path times host kernels against their subgraphs, so even an entry
    admitted under a speed override is not composed when it is slower."""
    from fact.agent import engine
    good = tmp_path / "good.json"
    good.write_text(json.dumps(entry(kernel("attention_correct.cpp"))))
    assert fact("add", str(good)).returncode == 0
    registry_file = agent_env / "registry.json"
    document = json.loads(registry_file.read_text())
    [stored] = document["entries"]
    assert engine.discover(entry.graph, arch="host")["matches"][0]["classification"] == "REUSE"
    stored["tuned"][-1].update(speedup=0.005, ms=10.0, baseline={"name": "PyTorch eager (same run)", "ms": 0.05})
    registry_file.write_text(json.dumps(document))
    [match] = engine.discover(entry.graph, arch="host")["matches"]
    assert match["classification"] == "NEW" and match["registry_entry"] == ""
    assert f"entry {stored['id']} is not used: slower than PyTorch on host CPU" in match["classification_reason"]

    import fact as fact_package
    from agent_support import MODEL_SOURCE
    namespace: dict = {}
    exec(compile(MODEL_SOURCE, "tiny_models", "exec"), namespace)
    model, inputs = namespace["TinyAttention"](), namespace["get_inputs"]()
    composed = fact_package.optimize(model, inputs, work_dir=tmp_path / "composed", remainder="eager")
    assert composed.fact_report.composed == [], composed.fact_report.to_json()

    # With an override the engine plans it (the plan says so), and the CPU path times the host
    # kernel against the subgraph: the slow kernel stays out of the composed module all the same.
    assert fact("remove", stored["id"]).returncode == 0
    overridden = entry(kernel("attention_slow.cpp"))
    overridden["speed_override"] = {"reason": "registry test: the CPU path's timing"}
    (tmp_path / "slow.json").write_text(json.dumps(overridden))
    assert fact("add", str(tmp_path / "slow.json")).returncode == 0
    composed = fact_package.optimize(model, inputs, work_dir=tmp_path / "overridden", remainder="eager")
    report = composed.fact_report.to_json()
    assert report["composed"] == [], report
    [left] = [r for r in report["left_to_pytorch"] if r["stage"] == "speed"]
    assert "slower than PyTorch's own run of the subgraph" in left["reason"], left
    assert any("under a speed override (not timed faster than PyTorch): registry test" in note
               for note in report["notes"]), report["notes"]

    # A plan that names the slow entry (written before the rule, or by hand) is refused by the executor.
    from fact.compose.guards import registry_speed_refusal
    replacement = {"registry_speed": {"measured": stored["tuned"][-1], "speed_override": None}}
    assert "measured slower than PyTorch on host CPU" in registry_speed_refusal(replacement)
    assert registry_speed_refusal({"registry_speed": {"measured": stored["tuned"][-1],
                                                      "speed_override": "a test of composition"}}) is None
    replacement["registry_speed"]["measured"] = {**stored["tuned"][-1], "speedup": 1.5}
    assert registry_speed_refusal(replacement) is None
