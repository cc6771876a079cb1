"""The gates (python/fact/agent/gates.py): every kernel passes the same ones, whoever wrote it.
A correct kernel passes them all with FACT's timer and the same-run baseline; a crash or a hang
costs the caller one attempt (a child process with a time limit), never the caller's process;
a library built for another kind, or one whose results are wired to the wrong tensors, fails.
(Each harness exploit is rejected in test_agent_synthesis.py, through the loop.)"""
from __future__ import annotations

import json

import pytest

from agent_support import capture, engine_or_skip, kernel, probe_the_baseline, write_model

pytestmark = pytest.mark.slow


@pytest.fixture
def task(agent_env, tmp_path):
    engine_or_skip()
    from fact.agent import engine
    graph = capture(write_model(tmp_path), "TinyAttention", tmp_path / "graph.json")
    return engine.task(graph, "1", arch="host")


def built(source: str) -> str:
    from fact.agent import engine
    result = engine.build(source)
    assert result["status"] in ("built", "cached"), result
    return result["library"]


def test_a_correct_kernel_passes_every_gate_and_is_timed_against_pytorch(task, tmp_path):
    from fact.agent import gates
    report = gates.run_gates(task["call"], task["semantics"]["fragment"], built(kernel("attention_correct.cpp")))
    assert report.passed, report.failure
    assert [c["name"] for c in report.checks] == list(gates.CHECK_ORDER)
    assert report.rel_err <= report.tolerance == 1e-5
    assert report.timing["ms"] > 0 and report.timing["baseline_ms"] > 0
    assert "steady_clock" in report.timing["timer"] and "interleaved" in report.timing["timer"]
    assert "same process" in report.timing["baseline"] and report.timing["baseline_status"] == "ok"
    assert report.timing["speedup"] == pytest.approx(report.timing["baseline_ms"] / report.timing["ms"])


def test_the_baseline_is_timed_by_the_core_beside_the_kernel_without_a_copy(task, tmp_path, monkeypatch):
    """The PyTorch baseline runs inside the verifier's timer: a baseline made 30 ms slower (in the
    gates' child, through sitecustomize) shows those 30 ms, and the speedup is the ratio of the
    one report's medians. Only its verifying call copies its outputs into the verifier's buffers:
    the timed runs are PyTorch's work alone."""
    from fact.agent import gates
    counts = probe_the_baseline(tmp_path, monkeypatch, sleep_ms=30)
    work = tmp_path / "gates"
    report = gates.run_gates(task["call"], task["semantics"]["fragment"], built(kernel("attention_correct.cpp")),
                             iters=10, work_dir=work)
    assert report.passed, report.failure
    timing = report.timing
    assert 30.0 <= timing["baseline_ms"] < 30.0 + 100.0
    assert timing["ms"] < 30.0
    assert timing["speedup"] == pytest.approx(timing["baseline_ms"] / timing["ms"]) and timing["speedup"] > 1.0
    raw = json.loads((work / "result.json").read_text())
    verified = raw["report"]
    pytorch = verified["baselines"]["pytorch"]
    assert pytorch["status"] == "ok" and pytorch["check"]["passed"]
    assert timing["baseline_ms"] == pytorch["ms"]["median"] and timing["ms"] == verified["ms"]["median"]
    assert "baseline" not in raw  # no second, Python-side timing of the baseline
    seen = json.loads(counts.read_text())
    # One verifying run, the warmup runs and the timed runs; one copy per result, all of them the
    # verifying run's.
    assert seen["runs"] == 1 + verified["timing"]["warmup_runs"] + pytorch["ms"]["runs"], (seen, verified["timing"])
    assert seen["copies"] == len(task["call"]["results"]), seen


def test_a_crash_or_a_hang_costs_one_attempt(task):
    from fact.agent import gates
    crash = gates.run_gates(task["call"], task["semantics"]["fragment"], built(kernel("crash.cpp")), timing=False)
    assert not crash.passed and crash.failed_check == "crash" and "SIGSEGV" in crash.failure
    hang = gates.run_gates(task["call"], task["semantics"]["fragment"], built(kernel("hang.cpp")), timing=False,
                           timeout=8)
    assert not hang.passed and hang.failed_check == "time_limit" and "8 s" in hang.failure


def test_a_library_for_another_call_fails_to_load_or_verify(task):
    from fact.agent import engine, gates
    other_kind = engine.build(kernel("attention_correct.cpp"), kind="gemm")["library"]
    report = gates.run_gates(task["call"], task["semantics"]["fragment"], other_kind, timing=False)
    assert not report.passed and report.failed_check == "load" and "kind 'gemm'" in report.failure
    # Results addressed through the wrong slot: the output stays poisoned.
    call = dict(task["call"])
    call["args"] = dict(call["args"], pointers=[dict(p, index=0, **{"from": "operand"}) if p["from"] == "result" else p
                                                for p in call["args"]["pointers"]])
    report = gates.run_gates(call, task["semantics"]["fragment"], built(kernel("attention_correct.cpp")), timing=False)
    assert not report.passed and report.failed_check in ("inputs_unchanged", "poisoned_outputs_written")
