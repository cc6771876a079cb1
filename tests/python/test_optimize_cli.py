"""`fact optimize` as a new user runs it, from a plain shell (FACT's environment not on PATH), on
the CPU (no GPU, kernels rendered, not compiled): `--dtype bf16` accepted; third-party noise of the Python stages (a model file that prints
Inductor-style autotuning lines and warns) kept in <out>/logs/ and off the terminal; the tables
with full shapes and 1a/1b labels; the package composes the plan; report.md explains its
columns, places each kernel on the roofline and embeds the roofline plot; report.html is one
file. Also `fact.plots` on a GPU run's report (tuning + e2e data, synthesized here) and
`fact realize` / `fact tune` on a machine without a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fact._engine
import fact.plots

REPO_ROOT = Path(__file__).resolve().parents[2]

try:
    ENGINE = fact._engine.engine_path()
except fact._engine.EngineNotFound as error:  # pragma: no cover - the test command builds it
    ENGINE = None
    WHY = str(error)
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no `fact` engine built")

NOISY_MODEL = textwrap.dedent('''
    import sys, warnings
    import torch

    print("triton_mm_54 0.1937 ms 58.8% ACC_TYPE='tl.float32' ALLOW_TF32=False BLOCK_K=64")
    print("AUTOTUNE mm(8192x768, 768x3072)", file=sys.stderr)
    warnings.warn("a noisy third-party warning")


    class NoisyMLP(torch.nn.Module):
        def __init__(self, width, hidden):
            super().__init__()
            self.fc1 = torch.nn.Linear(width, hidden)
            self.fc2 = torch.nn.Linear(hidden, width)
            self.proj = torch.nn.Linear(width, width)

        def forward(self, x):
            y = self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh")) + x
            return self.proj(y)


    def get_inputs(dtype=torch.float32, device="cpu"):
        return [torch.randn(4, 16, 64, dtype=dtype, device=device)]


    def get_init_inputs():
        return [64, 96]
''')


def _env() -> dict:
    """A plain shell's environment: FACT's Python environment not on PATH, no FACT_PYTHON, no
    PYTHONPATH (`fact` finds the interpreter it was built with, and its source tree's package)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FACT_LOG_DIR", "FACT_VERBOSE", "FACT_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != here)
    return env


PROCESS_PROBE = REPO_ROOT / "tests" / "python" / "data" / "process_probe"


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """One `fact optimize` run of the noisy model (CPU, --no-compile): (terminal, out dir). Every
    Python process of the run records itself in <folder>/processes.jsonl (data/process_probe:
    torch.export calls, JSON files read)."""
    folder = tmp_path_factory.mktemp("optimize")
    (folder / "noisy_mlp.py").write_text(NOISY_MODEL)
    out = folder / "out"
    env = {**_env(), "PYTHONPATH": str(PROCESS_PROBE), "FACT_TEST_PROCESS_RECORD": str(folder / "processes.jsonl")}
    done = subprocess.run([str(ENGINE), "optimize", "noisy_mlp.py:NoisyMLP", "--dtype", "bf16",
                           "--no-compile", "-o", str(out)],
                          cwd=folder, capture_output=True, text=True, env=env, timeout=900)
    terminal = done.stdout + done.stderr
    assert done.returncode == 0, terminal
    return terminal, out


@needs_engine
def test_one_python_process_exports_once_and_reads_back_no_json(optimized):
    """The whole pipeline is one Python process (the `fact` command's one child): one
    torch.export for capture and package alike, and no stage reads a JSON file that another
    stage wrote (graph, plan and report pass in memory; the files are for the reader)."""
    terminal, out = optimized
    records = [json.loads(line) for line in (out.parent / "processes.jsonl").read_text().splitlines()]
    assert len(records) == 1, records
    [driver] = records
    assert driver["argv"][0].endswith("optimize_run.py"), driver
    assert driver["exports"] == 1, driver
    written_by_the_run = [path for path in driver["json_reads"] if Path(path).is_relative_to(out)]
    assert not written_by_the_run, written_by_the_run
    for artifact in ("graph.json", "plan/plan.json", "report.json"):
        assert (out / artifact).is_file(), artifact


@needs_engine
def test_the_terminal_shows_facts_stages_and_the_logs_keep_the_noise(optimized):
    terminal, out = optimized
    for noise in ("triton_mm_54", "AUTOTUNE", "a noisy third-party warning"):
        assert noise not in terminal, terminal
    logs = out / "logs"
    captured = (logs / "capture.log").read_text() + (logs / "package.log").read_text()
    assert "triton_mm_54" in captured and "AUTOTUNE" in captured and "a noisy third-party warning" in captured
    for stage in ("== capture", "== plan", "== discover", "== realize", "== roofline", "== package",
                  "== report", "== skipped"):
        assert stage in terminal, stage
    assert "python" not in terminal.split("== capture")[1].splitlines()[1]  # no command line without -v
    assert "== discover (precision mode: native)" in terminal  # --dtype bf16 was accepted as bfloat16
    log = (logs / "optimize.log").read_text()
    assert "== discover" in log and "$ " in log  # everything printed, and the commands, are in the log


@needs_engine
def test_tables_show_full_shapes_and_sub_call_labels(optimized):
    terminal, _ = optimized
    realize = terminal.split("== realize")[1].split("== roofline")[0]
    assert "\n1a  gemm_bias_gelu_tanh 64x96x64 bfloat16" in realize, realize
    assert "\n1b  gemm_bias_residual 64x64x96 bfloat16" in realize, realize
    assert "\n 2  gemm_bias 64x64x64 bfloat16" in realize, realize
    discover = terminal.split("== discover")[1]
    assert "class: REUSE = " in discover and "ADAPT = " in discover and "NEW = " in discover
    assert "accepted (no est. saving: note)" in discover and "note: #2 save(s) no time" in discover


@needs_engine
def test_the_package_composes_the_plan(optimized):
    terminal, out = optimized
    assert "2 replacement(s) composed, 0 item(s) left to PyTorch" in terminal, terminal
    plan = json.loads((out / "plan" / "plan.json").read_text())
    assert plan["inputs"] == [{"shape": [4, 16, 64], "dtype": "torch.bfloat16"}]


@needs_engine
def test_report_explains_columns_places_kernels_on_the_roofline_and_embeds_plots(optimized):
    _, out = optimized
    report = (out / "report.md").read_text()
    for text in ("## How to read this report", "**REUSE**", "**ADAPT**", "**NEW**", "Estimated vs measured",
                 "saves 0.0 µs", "## Roofline", "limited by", "| 1a | gemm_bias_gelu_tanh 64x96x64 bfloat16 |",
                 "memory", "not measured", "## Plots", "![", "(roofline.png)", "`logs/`"):
        assert text in report, text
    assert "Not drawn here: end-to-end speedups (no e2e.json" in report
    assert (out / "roofline.png").read_bytes()[:4] == b"\x89PNG"
    page = (out / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
    assert "<table>" in page and "<h2>Roofline</h2>" in page
    doc = json.loads((out / "report.json").read_text())
    assert [p["label"] for p in doc["roofline"]] == ["1a", "1b", "2"]
    assert all(p["limit"] in ("compute", "memory") for p in doc["roofline"])


def test_plots_of_a_gpu_run_draw_every_plot_and_report_html(tmp_path):
    """report.json and e2e.json as a GPU run writes them (synthesized): all four plots."""
    candidates = [{"config": f"c{i}", "tflops": 300.0 + 20 * i, "ms": {"median": 1.0 - 0.05 * i}}
                  for i in range(6)]
    report = {
        "model": "m.py:M", "device_profile": {"name": "NVIDIA H200"},
        "roofline": [{"label": "1a", "flops": 3e11, "min_bytes": 5e8, "intensity_flop_per_byte": 600.0,
                      "compute_ceiling_flops_per_s": 9e14, "memory_ceiling_bytes_per_s": 4.5e12,
                      "ridge_flop_per_byte": 200.0, "bound_seconds": 3.3e-4, "achieved_flops_per_s": 6e14}],
        "tuning": [{"call": "1a", "best": {"config": "c5", "tflops": 400.0, "ms": {"median": 0.75}},
                    "baselines": {"cublas": {"ms": 0.9, "tflops": 333.0}, "cublaslt": {"ms": 0.8, "tflops": 375.0}},
                    "candidates": candidates},
                   {"call": "1b", "error": "no configuration verified"}]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    (tmp_path / "e2e.json").write_text(json.dumps({"device": "NVIDIA H200", "cases": [{
        "precision": "native", "speedup": {"torch_eager": 2.1, "torch_compile": 1.3,
                                           "torch_compile_max_autotune": 0.97}}]}))
    (tmp_path / "report.md").write_text("# FACT optimize report\n\n## Plots\n\nold section\n")
    drawn = fact.plots.write_report_plots(tmp_path, log=lambda line: None)
    assert drawn == ["roofline.png", "e2e_speedup.png", "kernel_speedup.png", "tuning_scatter.png"]
    for name in drawn:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG", name
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.count("## Plots") == 1 and "old section" not in markdown
    assert "(e2e_speedup.png)" in markdown and "(tuning_scatter.png)" in markdown
    assert "Not drawn" not in markdown
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 4


@needs_engine
def test_realize_without_o_writes_beside_the_graph(tmp_path):
    graph = tmp_path / "graphs" / "block.json"
    graph.parent.mkdir()
    graph.write_text((REPO_ROOT / "tests" / "data" / "graphs" / "mingpt_block_bf16.json").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([str(ENGINE), "realize", str(graph)], cwd=elsewhere, capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert (graph.parent / "kernels" / "manifest.json").is_file()
    assert not list(elsewhere.iterdir())
    assert "\n1a  gemm_bias_gelu_tanh 65536x3072x768 bfloat16" in done.stdout, done.stdout
    assert "\n1b  gemm_bias_residual 65536x768x3072 bfloat16" in done.stdout, done.stdout


@needs_engine
def test_tune_without_a_gpu_fails_fast_with_the_reason(tmp_path):
    reason = subprocess.run([str(ENGINE), "tune", "--problem", "m=256,n=256,k=256", "--dtype", "bf16",
                             "-o", str(tmp_path)], capture_output=True, text=True, env=_env(), timeout=60)
    if "cannot tune here" not in reason.stderr:
        pytest.skip("a GPU is usable here: fact tune tunes")
    assert reason.returncode == 2
    assert "insufficient" not in reason.stderr
    assert not (tmp_path / "tune-summary.json").exists()  # nothing was compiled or tuned
