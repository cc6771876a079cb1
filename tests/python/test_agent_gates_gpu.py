"""The gates' GPU path (python/fact/agent/gates.py with device="cuda"): a CUDA kernel for the
subgraph ABI, built by the engine with nvcc, runs through the same gates as a host library --
CUDA buffers with guard bands, completion on return and on another stream, CUDA-event timing
against the same-run PyTorch baseline, whose timed runs copy nothing into the verifier's
buffers (only its verifying run does). The correct kernel passes every gate; the same kernel
without its causal mask is rejected by the float64 comparison. The build alone (nvcc) is
checked everywhere nvcc is; the gates need a CUDA GPU."""
from __future__ import annotations

import json

import pytest
import torch

from agent_support import capture, engine_or_skip, kernel, probe_the_baseline, write_model

pytestmark = pytest.mark.slow


def _task(tmp_path):
    engine_or_skip()
    from fact.agent import engine
    graph = capture(write_model(tmp_path), "TinyAttention", tmp_path / "graph.json")
    return engine.task(graph, "1", arch="sm_90a")


def _build_cuda(source: str) -> str:
    from fact.agent import engine
    result = engine.build(source, device="cuda")
    if result["status"] == "unavailable":
        pytest.skip(f"no CUDA compiler: {result.get('reason')}")
    assert result["status"] in ("built", "cached"), result
    return result["library"]


def test_a_cuda_subgraph_kernel_builds_with_nvcc(agent_env, tmp_path):
    library = _build_cuda(kernel("attention_correct_cuda.cu"))
    assert library.endswith(".so")
    broken = __import__("fact.agent.engine", fromlist=["build"]).build(
        kernel("attention_correct_cuda.cu").replace("attend<<<", "attend_missing<<<"), device="cuda")
    assert broken["status"] == "failed" and broken["diagnostics"], broken


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU tests run on the device host)")
def test_the_gates_on_the_gpu_pass_a_correct_cuda_kernel_and_reject_a_wrong_one(agent_env, tmp_path, monkeypatch):
    from fact.agent import gates
    task = _task(tmp_path)
    source = kernel("attention_correct_cuda.cu")
    counts = probe_the_baseline(tmp_path, monkeypatch)
    work = tmp_path / "gates"
    report = gates.run_gates(task["call"], task["semantics"]["fragment"], _build_cuda(source), device="cuda",
                             work_dir=work)
    assert report.passed, report.failure
    assert [c["name"] for c in report.checks] == list(gates.CHECK_ORDER)
    assert report.rel_err <= report.tolerance
    assert report.timing["ms"] > 0 and report.timing["baseline_ms"] > 0
    # The PyTorch baseline ran on the verifier's device buffers and stream, verified and timed by
    # the same CUDA-event timer, interleaved with the kernel.
    assert report.timing["baseline_status"] == "ok"
    assert "cuda_events" in report.timing["timer"] and "interleaved" in report.timing["timer"]
    assert report.timing["speedup"] == pytest.approx(report.timing["baseline_ms"] / report.timing["ms"])
    # Only the baseline's verifying run copied its outputs into the verifier's device buffers:
    # the timed runs (warmup and measured) are PyTorch's work alone, no copy on the timed stream.
    verified = json.loads((work / "result.json").read_text())["report"]
    seen = json.loads(counts.read_text())
    runs = verified["baselines"]["pytorch"]["ms"]["runs"]
    assert seen["runs"] == 1 + verified["timing"]["warmup_runs"] + runs, (seen, verified["timing"])
    assert seen["copies"] == len(task["call"]["results"]), seen

    wrong = _build_cuda("#define WITH_CAUSAL_MASK 0\n" + source)
    report = gates.run_gates(task["call"], task["semantics"]["fragment"], wrong, device="cuda", timing=False)
    assert not report.passed and report.failed_check == "float64_reference", report.failure
