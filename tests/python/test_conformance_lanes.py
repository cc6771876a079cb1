"""The GPU benchmark's measurement lanes (`python -m fact.conformance --gpu --gpus N`, lanes.py)
and --resume, on the CPU: N lanes of measurement workers take the cases from one queue, a case
that ends its worker is recorded as failed and that lane goes on with a fresh worker, and a
results file from an earlier run keeps the cases it measured.

The runner tests run the driver with --device cpu --sizes cpu on a small corpus of their own (as
test_conformance.py's runner smoke test): on the CPU a lane has no GPU of its own, the rest
(claims, per-lane crash recovery, the merged results file) is what a multi-GPU run does.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fact import conformance as conf
from fact.compose import engine_can_plan
from test_conformance_prepare import DIES, _environment  # a model that ends its worker; a fresh cache

REPO_ROOT = Path(__file__).resolve().parents[2]
CAN_PLAN, WHY_NOT = engine_can_plan()
needs_engine = pytest.mark.skipif(not CAN_PLAN, reason=f"no FACT engine to plan with: {WHY_NOT}")

def test_lane_cores_split_the_cores_evenly():
    cores = list(range(64))
    slices = [conf.lane_cores(lane, 4, cores) for lane in range(4)]
    assert slices == [cores[0:16], cores[16:32], cores[32:48], cores[48:64]]
    uneven = [conf.lane_cores(lane, 3, list(range(8))) for lane in range(3)]
    assert [len(s) for s in uneven] == [2, 3, 3]
    assert sorted(c for s in uneven for c in s) == list(range(8))  # each core in one lane
    assert conf.lane_cores(0, 1, [3, 1, 2]) == [1, 2, 3]
    assert conf.lane_cores(2, 4, [5, 6]) == [5]  # fewer cores than lanes: one each, shared


def test_lane_gpus_take_the_visible_ones(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,5")
    assert conf.visible_gpus() == ["2", "3", "5"]
    assert conf.lane_gpus("cuda", 2) == ["2", "3"]
    assert conf.lane_gpus("cuda", 0) == ["2", "3", "5"]
    with pytest.raises(conf.LaneError, match="3 GPU"):
        conf.lane_gpus("cuda", 4)
    with pytest.raises(conf.LaneError, match="--device cuda:1"):
        conf.lane_gpus("cuda:1", 2)
    assert conf.lane_gpus("cuda:1", 1) == ["2"]
    assert conf.lane_gpus("cpu", 2) == [None, None]
    assert conf.lane_gpus("cpu", 0) == [None]


def test_resumed_records_keep_what_was_measured():
    previous = {"suite": "conformance", "device": "NVIDIA H100", "date": "2026-11-26", "cases": [
        {"name": "a-bfloat16", "status": "ok", "fact_ms": 1.0},
        {"name": "b-bfloat16", "status": "wrong", "fact_ms": 2.0},
        {"name": "c-bfloat16", "status": "failed", "reason": "the worker died"},
        {"name": "d-bfloat16", "status": "skipped"}]}
    pending = [(0, "/x/a.py", "bfloat16"), (1, "/x/b.py", "bfloat16"), (2, "/x/c.py", "bfloat16"),
               (3, "/x/d.py", "bfloat16"), (4, "/x/a.py", "float32")]
    kept = conf.resumed_records(previous, pending)
    assert set(kept) == {0, 1}  # failed and skipped cases run again, other dtypes are other cases
    assert kept[0]["fact_ms"] == 1.0 and kept[0]["resumed_from"] == "NVIDIA H100 2026-11-26"
    assert set(conf.resumed_records(previous, pending, ["b-bfloat16"])) == {0}  # --remeasure a case
    assert set(conf.resumed_records(previous, pending, ["a"])) == {1}           # ... or a stem


@needs_engine
@pytest.mark.slow
def test_two_lanes_share_the_queue_and_survive_a_dying_worker(tmp_path):
    """`--gpus 2 --device cpu` over four cases, one of which ends its worker, resuming from a
    results file that measured one of them: the resumed case is kept as it was, the other three
    are each taken by exactly one lane, the dying one is recorded as failed from its lane's
    current case, and that lane's fresh worker goes on; the results file holds all four."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("gemm_addmm", "gemm_linear_nobias_2d", "gemm_linear_bias"):
        (corpus / f"{name}.py").write_text((REPO_ROOT / "corpus" / f"{name}.py").read_text())
    (corpus / "gemm_b_dies.py").write_text(DIES)
    previous = tmp_path / "previous.json"
    previous.write_text(json.dumps({
        "suite": "conformance", "device": "cpu", "date": "2026-11-25", "versions": {},
        "cases": [{"name": "gemm_linear_bias-float32", "model": "gemm_linear_bias",
                   "dtype": "float32", "precision": "strict", "status": "ok", "fact_ms": 0.5,
                   "speedup": {"torch_compile": 1.5}}]}))
    argv = [sys.executable, "-m", "fact.conformance", "--gpu", "--device", "cpu", "--sizes", "cpu",
            "--corpus", str(corpus), "--dtypes", "float32", "--iters", "2", "--warmup", "1",
            "--gpus", "2", "--resume", str(previous), "-o", str(tmp_path / "results"),
            "--work-dir", str(tmp_path / "work"), "--variant", "lanes"]
    done = subprocess.run(argv, capture_output=True, text=True, env=_environment(tmp_path), timeout=600)
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, log
    assert "[lane 0]" in done.stdout and "[lane 1]" in done.stdout, log
    [results] = list((tmp_path / "results").glob("conformance-cpu-*-lanes.json"))
    doc = json.loads(results.read_text())
    cases = {c["name"]: c for c in doc["cases"]}
    assert set(cases) == {"gemm_addmm-float32", "gemm_linear_nobias_2d-float32",
                          "gemm_linear_bias-float32", "gemm_b_dies-float32"}, log
    resumed = cases["gemm_linear_bias-float32"]
    assert resumed["resumed_from"] == "cpu 2026-11-25" and resumed["fact_ms"] == 0.5
    assert doc["settings"]["resumed"]["cases"] == 1 and doc["settings"]["lanes"] == 2
    for name in ("gemm_addmm-float32", "gemm_linear_nobias_2d-float32"):
        assert cases[name]["status"] == "ok" and cases[name]["fact_ms"] > 0, cases[name]
    dies = cases["gemm_b_dies-float32"]
    assert dies["status"] == "failed" and "worker process died" in dies["reason"], dies

    claims = {p.name: json.loads(p.read_text())
              for p in (tmp_path / "work" / conf.MEASURE_DIR).glob("*.claim")}
    assert len(claims) == 3, claims  # each measured case taken once; the resumed one not at all
    assert not any("gemm_linear_bias" in name for name in claims)
    dying_lane = next(c["worker"] for n, c in claims.items() if "gemm_b_dies" in n)
    logs = sorted(p.name for p in (tmp_path / "work" / conf.MEASURE_DIR).glob("worker-*.log"))
    assert {"worker-0-1.log", "worker-1-1.log"} <= set(logs), logs
    # the lane whose worker died went on with a fresh one only if cases were left to take
    after_death = [n for n in logs if n.startswith(f"worker-{dying_lane}-") and n != f"worker-{dying_lane}-1.log"]
    assert all(n == f"worker-{dying_lane}-2.log" for n in after_death), logs
    assert not list((tmp_path / "work").glob("current-*.json"))


def test_a_case_the_time_cap_stopped_mid_measurement_is_recorded_as_skipped(tmp_path):
    # The run of 2026-11-27 stopped while gemm_baddbmm_alibi-float32 was being measured: the
    # case had no record, so the results file lost it and a --resume would not have measured it.
    from fact.conformance.corpus import case_record
    from fact.conformance.driver import record_unmeasured
    from fact.conformance.run_files import _Run
    from fact.conformance.lanes import resumed_records

    run = _Run(tmp_path / "out", tmp_path / "work", "2026-11-27", "")
    pending = [(0, "corpus/gemm_addmm.py", "float32"), (1, "corpus/gemm_baddbmm_alibi.py", "float32")]
    done = case_record("gemm_addmm", "float32", "ok", "")
    run.record(0, done)
    record_unmeasured(run, pending)
    cases = {case["name"]: case for case in run.cases()}
    assert cases["gemm_addmm-float32"]["status"] == "ok"
    stopped = cases["gemm_baddbmm_alibi-float32"]
    assert stopped["status"] == "skipped" and "time cap" in stopped["reason"], stopped
    # A resume keeps the measured case and measures the stopped one again.
    kept = resumed_records({"device": "GPU", "date": "2026-11-27", "cases": list(cases.values())}, pending)
    assert set(kept) == {0}
