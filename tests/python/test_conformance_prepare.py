"""The GPU benchmark's prepare phase (`python -m fact.conformance --gpu --prepare-jobs N`), on
the CPU: parallel workers run each case's compile work before the serial measurements, timing
nothing, and the measurements find it in the caches.

Each test runs the driver on a small corpus of its own at CPU_TEST_SIZES (--device cpu --sizes
cpu, as test_conformance.py's runner smoke test) with a fresh FACT_CACHE_DIR, so Inductor's
caches (share_compile_caches: <FACT cache root>/inductor) start empty and whatever the
measurements find there, the prepare phase put there.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fact import conformance as conf
from fact.compose import engine_can_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
CAN_PLAN, WHY_NOT = engine_can_plan()
needs_engine = pytest.mark.skipif(not CAN_PLAN, reason=f"no FACT engine to plan with: {WHY_NOT}")

# A model whose forward ends its process: torch.export runs it, so the prepare worker dies.
DIES = '''"""A model whose forward ends the process."""
import os
import torch
N = 64
CPU_TEST_SIZES = {"N": 16}
DTYPES = ("float32",)
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = torch.nn.Linear(n, n)
    def forward(self, x):
        os._exit(7)
def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(N, N, dtype=dtype, device=device)]
def get_init_inputs():
    return [N]
'''
# A linear model that takes ten minutes to build in a prepare worker, and no time elsewhere.
SLOW_TO_PREPARE = '''"""A linear model whose construction sleeps in a prepare worker."""
import sys
import time
import torch
N = 64
CPU_TEST_SIZES = {"N": 16}
DTYPES = ("float32",)
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = torch.nn.Linear(n, n)
    def forward(self, x):
        return self.fc(x)
def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(N, N, dtype=dtype, device=device)]
def get_init_inputs():
    if "--prepare-worker" in sys.argv:
        time.sleep(600)
    return [N]
'''
# What every measured case records, with or without a prepare phase (run_gpu_case).
MEASURED_FIELDS = {"name", "model", "dtype", "precision", "status", "reason", "seconds", "inputs",
                   "sizes", "coverage", "runs", "remainder", "speed_guard", "config",
                   "replacements", "fact_ms", "rel_err", "baselines", "speedup", "timing", "bound",
                   "caches"}


def _corpus(folder: Path, files: dict[str, str | None]) -> Path:
    """A corpus folder: each name's text, or the repository's corpus file of that name (None)."""
    folder.mkdir()
    for name, text in files.items():
        source = text if text is not None else (REPO_ROOT / "corpus" / f"{name}.py").read_text()
        (folder / f"{name}.py").write_text(source)
    return folder


def _environment(tmp_path: Path) -> dict:
    """A fresh FACT cache (and so a fresh Inductor cache) for the driver and its workers."""
    env = dict(os.environ, FACT_CACHE_DIR=str(tmp_path / "fact-cache"),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    return env


def _driver_argv(tmp_path: Path, corpus: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fact.conformance", "--gpu", "--device", "cpu", "--sizes", "cpu",
            "--corpus", str(corpus), "--dtypes", "float32", "--iters", "2", "--warmup", "1",
            "-o", str(tmp_path / "results"), "--work-dir", str(tmp_path / "work"),
            "--variant", "prepare", *extra]


def _results(tmp_path: Path) -> dict:
    [results] = list((tmp_path / "results").glob("conformance-cpu-*-prepare.json"))
    return json.loads(results.read_text())


def _prepare_record(tmp_path: Path, name: str) -> dict | None:
    return conf.load_json(conf.prepare_record_path(tmp_path / "work", name))


def _claimed_by(tmp_path: Path, name: str) -> dict | None:
    return conf.load_json(tmp_path / "work" / conf.PREPARE_DIR / f"{name}.claim")


def _wait_until_gone(pid: int, seconds: float = 20.0) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@needs_engine
@pytest.mark.slow
def test_prepare_phase_warms_the_caches_the_measurements_read(tmp_path):
    """Two prepare workers over three cases, one of which ends its worker: its record says so,
    the other cases are prepared (optimize, the composed run, torch.compile of the original).
    The measurements are what they are without a prepare phase, carry `seconds.prepare`, and
    their torch.compile baseline is served by the FX graph cache the prepare filled."""
    corpus = _corpus(tmp_path / "corpus", {"gemm_a_dies": DIES, "gemm_addmm": None,
                                           "gemm_linear_nobias_2d": None})
    done = subprocess.run(_driver_argv(tmp_path, corpus, "--prepare-jobs", "2"),
                          capture_output=True, text=True, env=_environment(tmp_path), timeout=300)
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, log
    assert "prepared gemm_addmm-float32 in" in done.stdout, log

    good = ("gemm_addmm-float32", "gemm_linear_nobias_2d-float32")
    for name in good:
        record = _prepare_record(tmp_path, name)
        assert record is not None and record["status"] == "ok", (record, log)
        assert set(record["steps"]) == {"build", "optimize", "run_composed", "torch_compile"}
        assert record["errors"] == {} and record["composed"] >= 1 and record["seconds"] > 0
        assert record["caches"]["fx_graph_misses"] >= 1, record  # it compiled: nothing was cached
    died = _prepare_record(tmp_path, "gemm_a_dies-float32")
    assert died is not None and died["status"] == "failed", died
    assert "prepare worker died" in died["error"] and died["log_tail"] is not None

    doc = _results(tmp_path)
    settings = doc["settings"]
    assert settings["prepare_jobs"] == 2 and settings["prepare_budget_s"] == 0.0
    assert settings["prepare"]["prepared"] == 2 and settings["prepare"]["failed"] == 1
    assert settings["prepare"]["not_started"] == 0 and settings["prepare"]["stopped"] == 0
    inductor_cache = tmp_path / "fact-cache" / "inductor"
    assert settings["caches"]["inductor_cache_dir"] == str(inductor_cache)
    assert settings["caches"]["fx_graph_cache"] and any(inductor_cache.iterdir())

    cases = {c["name"]: c for c in doc["cases"]}
    assert set(cases) == {*good, "gemm_a_dies-float32"}
    for name in good:
        case = cases[name]
        assert case["status"] == "ok", case
        assert MEASURED_FIELDS <= set(case), MEASURED_FIELDS - set(case)
        assert case["fact_ms"] > 0 and case["rel_err"] <= 1e-5
        assert case["coverage"]["composed"] >= 1 and case["runs"].startswith("composed")
        for baseline in ("torch_eager", "torch_compile"):
            assert case["baselines"][baseline]["ms"] > 0
            assert case["baselines"][baseline]["rel_err"] <= 1e-5
        assert case["seconds"]["prepare"] == _prepare_record(tmp_path, name)["seconds"]
        assert "prepare_error" not in case
        assert case["caches"]["fx_graph_hits"] >= 1, case["caches"]
    dies = cases["gemm_a_dies-float32"]
    assert dies["status"] == "failed" and "worker" in dies["reason"]
    assert "prepare worker died" in dies["prepare_error"]


@needs_engine
@pytest.mark.slow
def test_prepare_budget_stops_the_workers_and_the_measurements_go_on(tmp_path):
    """One prepare worker, stuck on its first case when the prepare budget runs out: it is
    stopped (its case recorded as stopped), the next case is never started, and both cases are
    then measured as usual."""
    corpus = _corpus(tmp_path / "corpus", {"gemm_a_slow": SLOW_TO_PREPARE, "gemm_addmm": None})
    done = subprocess.run(_driver_argv(tmp_path, corpus, "--prepare-jobs", "1",
                                       "--prepare-budget", "10"),
                          capture_output=True, text=True, env=_environment(tmp_path), timeout=300)
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, log
    stopped = _prepare_record(tmp_path, "gemm_a_slow-float32")
    assert stopped is not None and stopped["status"] == "stopped", (stopped, log)
    assert "budget" in stopped["error"] and stopped["seconds"] > 0
    assert _wait_until_gone(_claimed_by(tmp_path, "gemm_a_slow-float32")["pid"])
    assert _prepare_record(tmp_path, "gemm_addmm-float32") is None  # started after the budget: never

    doc = _results(tmp_path)
    assert doc["settings"]["prepare"]["stopped"] == 1
    assert doc["settings"]["prepare"]["not_started"] == 1
    assert doc["settings"]["prepare"]["wall_s"] >= 10
    cases = {c["name"]: c for c in doc["cases"]}
    assert cases["gemm_a_slow-float32"]["status"] == "ok", cases["gemm_a_slow-float32"]
    assert "budget" in cases["gemm_a_slow-float32"]["prepare_error"]
    assert cases["gemm_addmm-float32"]["status"] == "ok", cases["gemm_addmm-float32"]
    assert "prepare" not in cases["gemm_addmm-float32"]["seconds"]


@needs_engine
@pytest.mark.slow
def test_sigterm_during_prepare_stops_the_workers_and_writes_the_results(tmp_path):
    """SIGTERM to the driver while a prepare worker is busy: the worker (and its process group)
    is gone, its case is recorded as stopped, and the results file is written (no case
    measured: the case is listed as skipped, so a --resume measures it)."""
    corpus = _corpus(tmp_path / "corpus", {"gemm_a_slow": SLOW_TO_PREPARE})
    driver = subprocess.Popen(_driver_argv(tmp_path, corpus, "--prepare-jobs", "1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_environment(tmp_path))
    try:
        end = time.time() + 120
        while _claimed_by(tmp_path, "gemm_a_slow-float32") is None and time.time() < end:
            assert driver.poll() is None, driver.stdout.read()
            time.sleep(0.2)
        claim = _claimed_by(tmp_path, "gemm_a_slow-float32")
        assert claim is not None, "the prepare worker took no case in 120 s"
        driver.send_signal(signal.SIGTERM)
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, output[-6000:]
    assert _wait_until_gone(claim["pid"])
    stopped = _prepare_record(tmp_path, "gemm_a_slow-float32")
    assert stopped is not None and stopped["status"] == "stopped"
    assert "stopped" in stopped["error"]
    doc = _results(tmp_path)
    assert [(c["name"], c["status"]) for c in doc["cases"]] == [("gemm_a_slow-float32", "skipped")]
    assert "stopped" in doc["cases"][0]["reason"] and doc["settings"]["prepare"]["stopped"] == 1


def test_prepare_defaults_and_deadline():
    """--prepare-jobs: none on the CPU, half the cores (at most 8) on a GPU; --prepare-budget:
    45% of --time-budget, no limit without one; the prepare deadline never passes the run's."""
    assert conf.default_prepare_jobs("cpu") == 0
    assert 1 <= conf.default_prepare_jobs("cuda") <= 8
    assert conf.default_prepare_jobs("cuda") == max(1, min(8, conf.available_cores() // 2))

    class Args:
        prepare_budget = 0.0

    args = Args()
    assert conf._prepare_deadline(args, 1000.0, 0.0) == 0.0        # no limit at all
    assert conf._prepare_deadline(args, 1000.0, 1400.0) == 1400.0  # the run's deadline
    args.prepare_budget = 180.0
    assert conf._prepare_deadline(args, 1000.0, 0.0) == 1180.0
    assert conf._prepare_deadline(args, 1000.0, 1100.0) == 1100.0
    assert conf.PREPARE_BUDGET_SHARE == pytest.approx(0.45)


def test_measured_case_gets_its_prepare_record(tmp_path):
    """with_prepare_record: seconds.prepare from the record, prepare_error when it was not ok,
    the case as it was when there is no record."""
    conf.write_json(conf.prepare_record_path(tmp_path, "a-float32"), {"status": "ok", "seconds": 12.5})
    conf.write_json(conf.prepare_record_path(tmp_path, "b-float32"),
                    {"status": "stopped", "seconds": 3.0, "error": "the prepare budget ran out during it"})
    a = conf.with_prepare_record({"name": "a-float32", "seconds": {"optimize": 1.0}}, tmp_path)
    assert a == {"name": "a-float32", "seconds": {"optimize": 1.0, "prepare": 12.5}}
    b = conf.with_prepare_record({"name": "b-float32", "status": "skipped"}, tmp_path)
    assert b["seconds"] == {"prepare": 3.0} and "budget" in b["prepare_error"]
    assert conf.with_prepare_record({"name": "c-float32"}, tmp_path) == {"name": "c-float32"}
