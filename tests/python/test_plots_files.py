"""The engine writes data only; the Python package draws. Nothing in src/ or include/ starts a
script from bench/ (no literal names one, nor a path into bench/ other than `fact bench`'s results
folder, data), and
`python -m fact.plots` draws what `fact tune` and `fact bench` used to hand to bench scripts: a
tuning run's scatter and a results file's speedup chart, beside their JSON."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fact.plots
from test_engine_layout import ROOT, engine_files, without_comments


def bench_script_references(files: list[Path], scripts: set[str], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        for number, line in enumerate(without_comments(path.read_text()).splitlines(), 1):
            for literal in re.findall(r'"((?:[^"\\]|\\.)*)"', line):
                names_script = any(literal == s or literal.endswith("/" + s) for s in scripts)
                into_bench = re.search(r"\bbench/(?!results\b)", literal) is not None
                if names_script or into_bench or literal.endswith(".py") and "plot" in literal:
                    found.append(f"{path.relative_to(root)}:{number}: {literal!r}")
    return found


def bench_scripts() -> set[str]:
    return {p.name for p in (ROOT / "bench").rglob("*.py")} | {"plot_tune.py", "plot_results.py"}


def test_no_engine_file_starts_a_bench_script():
    assert bench_script_references(engine_files(), bench_scripts()) == []


def test_the_check_catches_a_script_name_and_a_path_into_bench(tmp_path):
    source = tmp_path / "src" / "x.cpp"
    source.parent.mkdir()
    source.write_text('// "bench/plot_tune.py" in a comment is fine\n'
                      'run_plot_script("plot_tune.py", {});\n'
                      'auto p = source_dir / "bench/compose/op_overhead.py";\n'
                      'std::string out_dir = "bench/results";  // data, not a script\n'
                      'app.add_subcommand("bench", "Benchmark suites");\n')
    found = bench_script_references([source], {"plot_tune.py", "op_overhead.py"}, root=tmp_path)
    assert found == ["src/x.cpp:2: 'plot_tune.py'", "src/x.cpp:3: 'bench/compose/op_overhead.py'"]


def _tune_result() -> dict:
    candidates = [{"config": f"c{i}", "status": "ok", "ms": {"median": 1.0 - 0.1 * i, "p10": 0.9 - 0.1 * i,
                                                              "p90": 1.1 - 0.1 * i}} for i in range(4)]
    candidates[3]["best"] = True
    candidates.append({"config": "c4", "status": "wrong_result", "ms": {"median": 0.4}})
    candidates.append({"config": "c5", "status": "cannot_implement"})
    return {"problem": "gemm_bias 256x256x256 bfloat16", "key": {"epilogue": "bias"}, "candidates": candidates,
            "baselines": {"cublaslt": {"status": "ok", "ms": 0.8, "fused": True}, "cublas": {"status": "failed"}}}


def test_a_tune_report_is_drawn_beside_its_json(tmp_path):
    path = tmp_path / "tune-gemm.json"
    path.write_text(json.dumps(_tune_result()))
    done = subprocess.run([sys.executable, "-m", "fact.plots", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    png = tmp_path / "tune-gemm.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {png}" in done.stdout


def test_a_bench_results_file_is_drawn_beside_it(tmp_path):
    path = tmp_path / "gemm-h100-2026-11-27.json"
    path.write_text(json.dumps({"suite": "gemm", "device": "H100", "date": "2026-11-27", "versions": {},
                                "cases": [{"name": "a", "precision": "native", "fact_ms": 1.0,
                                           "speedup": {"cublas": 1.2}, "baselines": {"cublas": {"ms": 1.2}}},
                                          {"name": "b", "precision": "native", "fact_ms": None,
                                           "status": "no_kernel", "baselines": {"cublas": {"ms": 1.0}}}]}))
    assert fact.plots.plot_file(path, log=lambda line: None) == tmp_path / "gemm-h100-2026-11-27.png"
    assert (tmp_path / "gemm-h100-2026-11-27.png").read_bytes()[:4] == b"\x89PNG"


def test_nothing_timed_draws_nothing_and_another_document_is_refused(tmp_path):
    untimed = dict(_tune_result(), candidates=[{"config": "c0", "status": "build_failed"}])
    path = tmp_path / "tune-none.json"
    path.write_text(json.dumps(untimed))
    said = []
    assert fact.plots.plot_file(path, log=said.append) is None
    assert said == [f"{path}: nothing to plot (no configuration was timed)"]
    assert not (tmp_path / "tune-none.png").exists()
    other = tmp_path / "plan.json"
    other.write_text(json.dumps({"schema": "fact.plan/2"}))
    with pytest.raises(ValueError, match="neither a `fact tune` report"):
        fact.plots.plot_file(other)
    done = subprocess.run([sys.executable, "-m", "fact.plots", str(other)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "neither a `fact tune` report" in done.stderr
