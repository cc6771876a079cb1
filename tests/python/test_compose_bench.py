"""The composition benchmark (bench/compose/run_block.py) on the CPU at a tiny size: the results
file's shape, the stages and their skipping, the report and plots, and the pieces it is built
from (subgraph modules, timing statistics). CUDA-only measurements are recorded as skipped or
errors with their reason here; the GPU run is scripts/device_compose.sh."""
import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fact
from fact import ops

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO_ROOT / "bench" / "compose"
sys.path.insert(0, str(BENCH_DIR))
from compose_report import render_report  # noqa: E402
from compose_results import device_slug, make_case  # noqa: E402
from compose_subgraphs import GemmCall, GemmSubgraph, record_gemm_calls  # noqa: E402
from fact.timing import summarize  # noqa: E402

import run_block as run_block_module  # noqa: E402

TINY = ["--device", "cpu", "--batch", "2", "--seq-len", "16", "--embed", "64", "--heads", "4",
        "--warmup", "1", "--iters", "3", "--overhead-calls", "10", "--overhead-repeats", "2",
        "--date", "2000-01-01"]
EXPECTED_FUSIONS = ["gemm_bias", "gemm_bias_gelu_tanh", "gemm_bias_residual", "gemm_bias_residual"]


from engine_support import needs_engine  # noqa: E402


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
        assert check["composed"] == 4
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
def test_each_composed_gemm_is_timed_alone_with_the_same_arguments(full_run):
    _, doc = full_run
    cases = cases_of(doc, "subgraphs")
    assert sorted(c["fusion"] for c in cases) == EXPECTED_FUSIONS
    for case in cases:
        assert case["status"] == "ok", case
        assert case["fact_ms"] > 0 and case["baselines"]["torch_eager"]["ms"] > 0
        # the CPU op is the float64 reference cast to bf16; the eager subgraph is bf16 math
        assert case["rel_err"] < 5e-3 and case["baselines"]["torch_eager"]["rel_err"] < 2e-2
    shapes = {c["shape"] for c in cases}
    assert shapes == {"32x192x64", "32x64x64", "32x256x64", "32x64x256"}


@needs_engine
def test_ablation_composes_each_rule_alone_then_all(full_run):
    if "patterns" not in inspect.signature(fact.optimize).parameters:
        pytest.xfail("fact.optimize does not accept patterns= yet (python/fact/compose.py)")
    _, doc = full_run
    cases = {c["name"]: c for c in cases_of(doc, "ablation")}
    assert set(cases) == {"ablation_mlp_gelu_tanh", "ablation_gemm_bias_residual", "ablation_gemm_bias",
                          "ablation_all"}
    for name, case in cases.items():
        assert case["status"] == "ok", case
        assert case["speedup"]["torch_eager"] > 0
    assert len(cases["ablation_all"]["composed"]) == 4
    assert len(cases["ablation_mlp_gelu_tanh"]["composed"]) == 2
    assert [line.split(":")[0] for line in cases["ablation_gemm_bias"]["composed"]] == ["gemm_bias"]


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


@pytest.mark.parametrize("epilogue,geometry", [
    ("bias", "linear"), ("bias,residual", "linear"), ("bias,act:gelu_tanh", "linear"),
    ("scale:0.5,bias,act:relu,residual", "linear"), ("bias,act:silu", "strided"), ("multiply", "strided"),
    ("bias,residual", "batched"),
])
def test_gemm_subgraph_module_computes_what_the_op_means(epilogue, geometry):
    torch.manual_seed(0)
    m, n, k, batch = 12, 8, 16, 1
    a = torch.randn(3 * 4 * k + 5)[5:].view(3, 4, k)  # read from its data pointer (storage offset 5)
    a_geometry = [0, k, 0]
    if geometry == "linear":   # A row-major (ld K), B = W^T with W N×K (column-major B, ld K)
        b, b_geometry = torch.randn(n, k), [1, k, 0]
    elif geometry == "strided":  # B row-major K×N inside a wider buffer (ld N + 4), offset 2
        b, b_geometry = torch.randn(k, n + 4)[:, 2:], [0, n + 4, 0]
    else:                      # 3 batches of 4×K · (N×K)^T
        m, batch = 4, 3
        a_geometry = [0, k, m * k]
        b, b_geometry = torch.randn(3, n, k), [1, k, n * k]
    bias, c = torch.randn(n), torch.randn(3, 4, n)
    args = (a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, [3, 4, n], torch.float32, 1.5, 0.7, 0.0,
            0.0, epilogue, -1, "")
    call = GemmCall("node", args)
    module = GemmSubgraph(call)
    assert module.as_linear == (geometry == "linear")
    want = ops.reference_gemm(*args[:17])
    torch.testing.assert_close(module(*call.tensors()), want, rtol=1e-5, atol=1e-5)
    # what run_block compiles with max-autotune must trace as one graph
    with torch._dynamo.config.patch(recompile_limit=64):  # one code object, many modules
        traced = torch.compile(module, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(traced(*call.tensors()), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(call.run(), want)  # the op itself (CPU: reference)
    assert call.fusion == "gemm_" + "_".join(
        step.partition(":")[2] if step.startswith("act:") else step.partition(":")[0]
        for step in epilogue.split(","))


def test_recorded_calls_keep_the_op_the_graph_calls():
    """fact::gemm and fact::gemm_planned nodes are both recorded, with fact::gemm's full
    arguments for the subgraph module and the graph's own op and arguments for timing."""
    if not hasattr(ops, "plan_gemm"):
        pytest.skip("this checkout has no fact::gemm_planned")
    torch.manual_seed(0)
    m, n, k = 6, 16, 16  # n == k: the second call reads the first one's output as its A
    scalars = (m, n, k, 1, [0, k, 0], [1, k, 0], [m, n], torch.float32, 1.0, 1.0, 0.0, 0.0, "bias,act:relu", -1, "")
    plan = ops.plan_gemm(*scalars)
    graph = torch.fx.Graph()
    a, b, bias = graph.placeholder("a"), graph.placeholder("b"), graph.placeholder("bias")
    first = graph.call_function(torch.ops.fact.gemm.default, (a, b, bias, None, *scalars))
    second = graph.call_function(torch.ops.fact.gemm_planned.default, (first, b, bias, None, plan))
    graph.output(second)
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    inputs = (torch.randn(m, k), torch.randn(n, k), torch.randn(n))
    calls = record_gemm_calls(module, inputs)
    assert [c.node for c in calls] == [first.name, second.name]
    assert calls[0].op is torch.ops.fact.gemm.default and calls[1].op is torch.ops.fact.gemm_planned.default
    assert calls[1].op_args[4] == plan and calls[1].args[4:] == tuple(ops.planned_arguments(plan))
    assert calls[1].fusion == "gemm_bias_relu" and calls[1].shape == f"{m}x{n}x{k}"
    for call in calls:
        want = ops.reference_gemm(*call.args[:17])
        torch.testing.assert_close(call.run(), want)
        torch.testing.assert_close(GemmSubgraph(call)(*call.tensors()), want, rtol=1e-5, atol=1e-5)


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
