"""The training-over-ranges benchmark (bench/training/run_training_ranges.py) on the CPU at its
--small widths: one module composed over a token range, timed and checked at sizes it was not
traced at; the results file names the versions and, per size, every variant's step time, the
ratio against the faster baseline, the gradient errors against float64 and where the composed
module's step spends its host time. CPU times are no
performance claim (the GPU run is scripts/device_parallel.sh's `ranges` job)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from compose_testing import needs_engine_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "bench" / "training" / "run_training_ranges.py"


@needs_engine_plan
def test_the_mlp_trains_over_its_token_range_at_untraced_sizes(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--small", "--layers", "2",
                           "--out-dir", str(tmp_path), "--work-dir", str(tmp_path / "work"),
                           "--range", "16..128", "--example", "32", "--sizes", "20,100",
                           "--warmup", "1", "--iters", "2"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [results] = tmp_path.glob("training-ranges-cpu-*.json")
    doc = json.loads(results.read_text())
    assert doc["composed"] == "RangeTrainingComposedModule", doc["report"]
    assert "torch" in doc["versions"] and doc["declared"].startswith("tokens=16..128")
    assert doc["report"]["backward"]["composed"], doc["report"]["backward"]
    assert [entry["size"] for entry in doc["sizes"]] == [20, 100]
    for entry in doc["sizes"]:
        assert set(entry["step_ms"]) == {"fact", "eager", "compile"}
        assert entry["vs_best"] > 0
        assert entry["grad_rel_err_vs_float64"]["fact"] < 1e-5, entry
        assert entry["host_profile"]["wall_ms"] > 0 and entry["host_profile"]["ops"], entry
