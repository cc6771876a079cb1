"""The training benchmark (bench/training/run_training.py) on the CPU at its --small widths:
the results file's schema, what it measures of a float32 and a bf16-autocast model (both
graphs composed, gradients against float64, step times of every variant, losses of the
training runs and their verdicts), and the time budget. The GPU run is scripts/
device_parallel.sh's `training` job; CPU times are no performance claim."""
import json
import os
import subprocess
import sys
from pathlib import Path

from compose_testing import needs_engine_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "bench" / "training" / "run_training.py"


def run(out_dir: Path, *extra: str, timeout: int = 300) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--small", "--out-dir", str(out_dir),
                           "--work-dir", str(out_dir / "work"), "--tag", "test", *extra],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [results] = out_dir.glob("training-cpu-*-test.json")
    return json.loads(results.read_text())


@needs_engine_plan
def test_a_float32_and_a_bf16_autocast_model_train_through_fact(tmp_path):
    doc = run(tmp_path, "--models", "mlp_f32,mingpt_bf16", "--steps", "3", "--seeds", "0,1")
    assert doc["schema"] == "fact.bench.training/1" and doc["device"] == "cpu"
    assert doc["settings"]["allow_tf32"] == {"matmul": False, "cudnn": False}
    assert "torch" in doc["versions"]
    mlp, mingpt = doc["models"]
    assert (mlp["model"], mlp["precision"], mlp["dtype"]) == ("mlp_f32-64", "strict", "float32")
    assert (mingpt["precision"], mingpt["dtype"]) == ("native", "bf16 autocast (float32 weights)")
    for model in (mlp, mingpt):
        assert "error" not in model and not model["skipped"], model.get("error")
        assert model["trains_composed"] and not model["fact_fell_back"]
        assert model["report"]["forward"]["kinds"] and model["report"]["backward"]["kinds"]
        assert set(model["step_ms"]) == {"fact", "eager", "compile"}
        assert model["speedup"]["vs_best"] == min(model["step_ms"]["eager"], model["step_ms"]["compile"]) \
            / model["step_ms"]["fact"]
        assert model["memory"] is None  # CUDA only
        assert model["optimize_s"] > 0 and set(model["first_step_s"]) == {"fact", "eager", "compile"}
    assert mlp["grad_within_bound"] and mlp["grad_rel_err"]["max"]["fact"] <= 1e-5
    # float32: the variants at the first seed, then the float64 reference trained by the same steps
    assert [(r["variant"], r["seed"]) for r in mlp["runs"]] == [("eager", 0), ("fact", 0), ("compile", 0),
                                                                 ("float64", 0)]
    assert all(r["steps"] == 3 and len(r["sampled"]) == 3 for r in mlp["runs"])
    assert mlp["loss"]["within_bound"] and mlp["loss"]["fact_vs_eager_rel"]["0"] <= 1e-4
    assert set(mlp["loss"]["vs_float64_rel"]) == {"fact", "eager", "compile"}
    assert all(0 <= v <= 1e-4 for v in mlp["loss"]["vs_float64_rel"].values())
    # bf16 autocast: both seeds for eager and FACT, FACT judged by eager's spread across them
    assert [(r["variant"], r["seed"]) for r in mingpt["runs"]] == [("eager", 0), ("fact", 0), ("eager", 1),
                                                                    ("fact", 1), ("compile", 0)]
    eager = [r["eval"] for r in mingpt["runs"] if r["variant"] == "eager"]
    assert mingpt["loss"]["eager_spread_abs"] == max(eager) - min(eager)
    assert set(mingpt["loss"]["fact_vs_eager_abs"]) == {"0", "1"}
    assert mingpt["grad_rel_err"]["bound"] is None and "grad_within_bound" not in mingpt


def test_a_spent_time_budget_still_writes_the_results_file(tmp_path):
    doc = run(tmp_path, "--models", "mlp_f32,llama_bf16", "--time-budget", "0", timeout=120)
    assert [m["model"] for m in doc["models"]] == ["mlp_f32-64", "llama_bf16"]
    assert all(m["skipped"] == ["all (time budget)"] for m in doc["models"])
