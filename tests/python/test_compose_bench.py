"""The composition benchmark (bench/compose/run_block.py) on the CPU at a tiny size: the results
file's shape, the stages and their skipping, the report and plots, and the pieces it is built
from (each replacement alone against the subgraph it replaced, timing statistics). CUDA-only
measurements are recorded as skipped or errors with their reason here; the GPU run is
scripts/device_compose.sh. The runs that plan need the engine in process (skipped until it
exports fact_engine_plan); the replacement subgraphs are tested with the fake kind."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fact
import fact.compose
import fake_kind

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO_ROOT / "bench" / "compose"
sys.path.insert(0, str(BENCH_DIR))
from compose_report import render_report  # noqa: E402
from compose_results import device_slug, make_case  # noqa: E402
from compose_subgraphs import relative_error, replacement_subgraphs  # noqa: E402
from fact.timing import summarize  # noqa: E402

import run_block as run_block_module  # noqa: E402

TINY = ["--device", "cpu", "--batch", "2", "--seq-len", "16", "--embed", "64", "--heads", "4",
        "--warmup", "1", "--iters", "3", "--overhead-calls", "10", "--overhead-repeats", "2",
        "--date", "2000-01-01"]

from test_compose_plan import needs_engine_plan as needs_engine  # noqa: E402


def run_block(out_dir: Path, *extra: str, timeout: int = 180) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT / "python"),
               TORCHINDUCTOR_CACHE_DIR=str(out_dir / "inductor"))
    done = subprocess.run([sys.executable, str(BENCH_DIR / "run_block.py"), *TINY, "--out-dir", str(out_dir),
                           "--work-dir", str(out_dir / "work"), *extra],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = out_dir / "compose-cpu-2000-01-01.json"
    assert results.is_file(), done.stdout[-3000:]
    return json.loads(results.read_text())


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("compose_bench")
    doc = run_block(out_dir, "--variants", "eager,fact_eager,fact_cuda_graphs")
    return out_dir, doc


def cases_of(doc: dict, stage: str) -> list[dict]:
    return [c for c in doc["cases"] if c["stage"] == stage]


@needs_engine
def test_results_file_has_the_shared_shape(full_run):
    _, doc = full_run
    assert doc["suite"] == "compose" and doc["date"] == "2000-01-01" and doc["device"] == "cpu"
    assert set(doc["versions"]) >= {"driver", "cuda", "torch", "cutlass", "fact"}
    assert doc["versions"]["torch"] == torch.__version__
    assert doc["cases"]
    for case in doc["cases"]:
        assert set(case) >= {"name", "precision", "status", "fact_ms", "rel_err", "baselines", "speedup",
                             "config", "stage"}, case["name"]
        assert case["precision"] in ("strict", "tf32", "native")
        assert (case["status"] == "ok") == ("reason" not in case), case
        for name, baseline in case["baselines"].items():
            assert {"ms", "rel_err"} <= set(baseline), (case["name"], name)
            if case["fact_ms"] and baseline["ms"]:
                assert math.isclose(case["speedup"][name], baseline["ms"] / case["fact_ms"], rel_tol=1e-9)
            else:
                assert name not in case["speedup"]


@needs_engine
def test_every_stage_is_recorded_and_cuda_only_work_says_why(full_run):
    _, doc = full_run
    assert list(doc["stages"]) == ["verify", "timing", "subgraphs", "ablation", "overhead"]
    for name, stage in doc["stages"].items():
        assert stage["status"] in ("ok", "partial"), (name, stage)
    graphs = [c for c in doc["cases"] if "cuda_graphs" in c["name"]]
    assert graphs and all(c["status"] == "error" and "CUDA device" in c["reason"] for c in graphs), graphs


@needs_engine
def test_verification_compares_both_against_float64(full_run):
    _, doc = full_run
    by_mode = {c["precision"]: c for c in cases_of(doc, "verify")}
    assert set(by_mode) == {"strict", "tf32", "native"}
    assert by_mode["tf32"]["status"] == "skipped" and "CUDA" in by_mode["tf32"]["reason"]
    for mode in ("strict", "native"):
        case = by_mode[mode]
        check = case["verification"]
        assert case["status"] == "ok" and check["passed"], case
        assert 0 < case["rel_err"] <= 2.0 * case["baselines"]["torch_eager"]["rel_err"]
        assert check["composed"] >= 3
    assert by_mode["strict"]["rel_err"] < 1e-5 < by_mode["native"]["rel_err"] < 2e-2


@needs_engine
def test_timing_cases_have_fact_and_baseline_times(full_run):
    _, doc = full_run
    case = next(c for c in cases_of(doc, "timing") if c["name"] == "block_bf16_fact_eager")
    assert case["status"] == "ok" and case["fact_ms"] > 0, case
    assert case["baselines"]["torch_eager"]["ms"] > 0 and case["speedup"]["torch_eager"] > 0
    assert case["timing"]["runs"] == 3 and case["timing"]["min_ms"] <= case["fact_ms"] <= case["timing"]["max_ms"]
    assert case["rel_err"] < 2e-2


@needs_engine
def test_each_composed_replacement_is_timed_alone(full_run):
    _, doc = full_run
    cases = cases_of(doc, "subgraphs")
    assert len(cases) >= 3
    for case in cases:
        assert case["status"] == "ok", case
        assert case["fact_ms"] > 0 and case["baselines"]["torch_eager"]["ms"] > 0
        # the CPU calls run the float64 host reference cast to bf16; the eager subgraph is bf16 math
        assert case["rel_err"] < 5e-3 and case["baselines"]["torch_eager"]["rel_err"] < 2e-2


@needs_engine
def test_ablation_composes_each_rule_alone_then_all(full_run):
    _, doc = full_run
    cases = {c["name"]: c for c in cases_of(doc, "ablation")}
    assert "ablation_all" in cases and len(cases) >= 2
    for name, case in cases.items():
        assert case["status"] == "ok", case
        assert case["speedup"]["torch_eager"] > 0
    assert len(cases["ablation_all"]["composed"]) >= max(len(c["composed"]) for c in cases.values())


@needs_engine
def test_overhead_reports_host_time_per_forward(full_run):
    _, doc = full_run
    case = next(c for c in cases_of(doc, "overhead") if "fact_eager" in c["name"])
    assert case["status"] == "ok", (case, doc["overhead"])
    assert case["host_us_per_forward"] > 0 and case["eager_host_us_per_forward"] > 0
    assert math.isclose(case["ratio_to_eager"],
                        case["host_us_per_forward"] / case["eager_host_us_per_forward"], rel_tol=1e-9)


@needs_engine
def test_report_renders_every_section(full_run):
    out_dir, doc = full_run
    report = (out_dir / "compose-cpu-2000-01-01.md").read_text()
    assert report == render_report(doc)
    for heading in ("## Summary", "## Stages", "## Verification against float64", "## End-to-end time",
                    "## Per subgraph", "## Ablation", "## Host overhead", "## What was composed"):
        assert heading in report
    assert "attention_causal" in report  # left to PyTorch, with its reason


@needs_engine
def test_plots_are_written_when_matplotlib_is_present(full_run):
    pytest.importorskip("matplotlib")
    out_dir, doc = full_run
    assert doc["plots"] == ["compose-cpu-2000-01-01-speedup.png", "compose-cpu-2000-01-01-ablation.png"]
    for name in doc["plots"]:
        assert (out_dir / name).read_bytes().startswith(b"\x89PNG")
    # the stand-alone plot script, as the lead runs it on a results file
    done = subprocess.run([sys.executable, str(BENCH_DIR / "plot_compose.py"),
                           str(out_dir / "compose-cpu-2000-01-01.json"), str(out_dir / "again")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out_dir.glob("again-*.png")) == ["again-ablation.png", "again-speedup.png"]


def test_spent_time_budget_skips_the_stages_and_still_writes_the_files(tmp_path, capsys):
    args = run_block_module.parse_args([*TINY, "--out-dir", str(tmp_path), "--work-dir", str(tmp_path / "work"),
                                        "--stages", "verify,overhead", "--time-budget", "0", "--no-plots",
                                        "--variant", "part"])
    assert run_block_module.BlockBenchmark(args).run() == 0
    doc = json.loads((tmp_path / "compose-cpu-2000-01-01-part.json").read_text())
    assert doc["variant"] == "part"
    skipped = {"status": "skipped", "seconds": 0.0, "reason": "time budget (0 s) spent before the stage"}
    assert doc["stages"] == {"verify": skipped, "overhead": skipped}
    assert doc["cases"] == [] and doc["reports"] == {}
    assert "| verify | skipped |" in (tmp_path / "compose-cpu-2000-01-01-part.md").read_text()
    assert "stage overhead: skipped (time budget)" in capsys.readouterr().out


def test_unknown_stage_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_block_module.parse_args(["--stages", "verify,warp"])
    assert exit_info.value.code == 2 and "unknown warp" in capsys.readouterr().err
    assert run_block_module.parse_args(["--stages", "ablation,verify"]).stages == ["ablation", "verify"]


class Chain(torch.nn.Module):
    def forward(self, x, z):
        y = 2.0 * x + 3.0 * z
        w = 0.5 * y + -1.0 * z
        return torch.relu(w) + y


def test_replacement_subgraphs_time_each_replacement_against_the_subgraph_it_replaced(tmp_path, reference):
    shape = [4, 8]
    plan = fake_kind.write_plan(tmp_path / "plan", (torch.empty(shape), torch.empty(shape)), [
        fake_kind.replacement(0, ["mul", "mul_1", "add"], ["x", "z"], ["add"],
                              [fake_kind.axpby_call("0", "x", "z", "add", shape, 2.0, 3.0)]),
        fake_kind.replacement(1, ["mul_2", "mul_3", "add_1"], ["add", "z"], ["add_1"],
                              [fake_kind.axpby_call("1", "add", "z", "add_1", shape, 0.5, -1.0)])])
    module = Chain()
    composed = fact.compose.apply_plan(module, (torch.randn(shape), torch.randn(shape)), plan,
                                       remainder="eager")
    x, z = torch.randn(shape), torch.randn(shape)
    cases = replacement_subgraphs(composed, (x, z))
    assert [(c.label, c.rule) for c in cases] == [("0", "axpby_rule"), ("1", "axpby_rule")]
    first, second = cases
    torch.testing.assert_close(first.run()[0], 2.0 * x + 3.0 * z)
    torch.testing.assert_close(second.tensors[0], 2.0 * x + 3.0 * z)  # its input as the block computes it
    for case in cases:
        assert relative_error(case.run(), case.reference()) < 1e-6
        assert relative_error(case.pytorch(), case.reference()) < 1e-6
        assert case.summary.startswith("axpby 32") and case.kernels == [""]
        # what run_block compiles with max-autotune must trace as one graph
        traced = torch.compile(case.module, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(traced(*case.tensors)[0], case.pytorch()[0])
    assert replacement_subgraphs(fact.compose.ComposedModule(module, None, None, composed.fact_report),
                                 (x, z)) == []


@needs_engine
def test_op_overhead_bench_runs_on_the_cpu_reference(tmp_path):
    """The GPU benchmark's plumbing (compose, record the calls, time) on the CPU."""
    import op_overhead

    setup = op_overhead.compose_mlp(precision="strict", work_dir=tmp_path, device="cpu",
                                    features=32, hidden=64)
    assert setup.launch_calls
    timings = op_overhead.op_timings(setup, calls=3, repeats=3)
    assert timings["implementation"].startswith("host reference")
    assert all(timings[name] > 0 for name in ("fact_launch_us", "linear_us", "composed_graph_us",
                                              "eager_module_us"))
    cases = op_overhead.overhead_cases(timings)
    launch = cases[0]
    assert (launch["baseline_us"], launch["fact_us"]) == (timings["linear_us"], timings["fact_launch_us"])
    assert launch["ratio"] == timings["linear_us"] / timings["fact_launch_us"]
    assert launch["goal_met"] == (timings["fact_launch_us"] <= timings["linear_us"] + 1.0)
    assert [c["fact"] for c in cases] == ["fact_launch_us", "fact_launch_inference_us",
                                          "composed_graph_us", "composed_module_us"]
    assert cases[1]["baseline_us"] == timings["linear_inference_us"] > 0


def test_timing_statistics():
    stats = summarize([5.0, 1.0, 3.0, 2.0, 4.0], "test")
    assert (stats.median_ms, stats.min_ms, stats.max_ms, stats.runs) == (3.0, 1.0, 5.0, 5)
    assert math.isclose(stats.p10_ms, 1.4) and math.isclose(stats.p90_ms, 4.6)
    with pytest.raises(ValueError):
        summarize([], "test")


def test_case_speedups_and_device_slug():
    case = make_case("x", "native", "timing", fact_ms=2.0,
                     baselines={"torch_eager": {"ms": 3.0, "rel_err": None}, "torch_compile": {"ms": None}})
    assert case["speedup"] == {"torch_eager": 1.5} and "reason" not in case
    failed = make_case("y", "native", "timing", status="error", reason="why")
    assert failed["reason"] == "why" and failed["fact_ms"] is None and failed["speedup"] == {}
    assert device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert device_slug("  ") == "unknown-device"
