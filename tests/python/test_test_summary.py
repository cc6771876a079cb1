"""scripts/test_summary.py: the end of the test command lists every skipped test with its reason,
from CTest's and pytest's JUnit files (formats as CMake 3.25 / pytest 8 write them)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("test_summary", REPO_ROOT / "scripts" / "test_summary.py")
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)

CTEST = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="3" failures="0" disabled="0" skipped="2" hostname="" time="0">
  <testcase name="GpuKernels.Runs" classname="GpuKernels.Runs" time="0.003" status="notrun">
    <skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>
    <system-out>[ RUN      ] GpuKernels.Runs
/src/test.cpp:55: Skipped
no CUDA device: GPU test not run
[  SKIPPED ] GpuKernels.Runs (0 ms)
</system-out>
  </testcase>
  <testcase name="Layouts/Mapping.X/0" classname="Layouts/Mapping.X/0" time="0.003" status="notrun">
    <skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>
    <system-out>[ RUN      ] Layouts/Mapping.X/0
/src/t.cpp:9: Skipped
slow (minutes of nvcc): runs with FACT_SLOW_TESTS=1,
which scripts/run_tests.sh sets
[  SKIPPED ] Layouts/Mapping.X/0 (0 ms)
</system-out>
  </testcase>
  <testcase name="Table.Aligns" classname="Table.Aligns" time="0.001" status="run"><system-out>ok</system-out></testcase>
</testsuite>
"""

PYTEST = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" skipped="2" tests="3">
<testcase classname="tests.python.test_install" name="test_pip_install" time="0.001">
  <skipped type="pytest.skip" message="slow (builds the engine with pip)">tests/python/test_install.py:45: slow</skipped></testcase>
<testcase classname="tests.python.test_compose_gpu.TestGpu" name="test_kernels[bf16]" time="0.001">
  <skipped type="pytest.skip" message="needs a CUDA GPU (Hopper) for FACT kernels">...</skipped></testcase>
<testcase classname="tests.python.test_console" name="test_ok" time="0.1"/>
</testsuite></testsuites>
"""


def test_every_skipped_test_is_listed_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # pytest ids are paths relative to the checkout
    (tmp_path / "ctest.xml").write_text(CTEST)
    (tmp_path / "pytest.xml").write_text(PYTEST)
    assert summary.ctest_skipped(tmp_path / "ctest.xml") == [
        ("GpuKernels.Runs", "no CUDA device: GPU test not run"),
        ("Layouts/Mapping.X/0", "slow (minutes of nvcc): runs with FACT_SLOW_TESTS=1, which scripts/run_tests.sh sets")]
    assert summary.pytest_skipped(tmp_path / "pytest.xml") == [
        ("tests/python/test_install.py::test_pip_install", "slow (builds the engine with pip)"),
        ("tests/python/test_compose_gpu.py::TestGpu::test_kernels[bf16]", "needs a CUDA GPU (Hopper) for FACT kernels")]
    text = summary.render([("C++ (ctest)", tmp_path / "ctest.xml", summary.ctest_skipped(tmp_path / "ctest.xml")),
                           ("Python (pytest)", tmp_path / "pytest.xml", summary.pytest_skipped(tmp_path / "pytest.xml"))])
    assert text.splitlines()[0] == "== Skipped (4)"
    assert "C++ (ctest) (2):" in text and "Python (pytest) (2):" in text


def test_a_suite_that_wrote_no_results_is_said_so(tmp_path, capsys):
    assert summary.main(["--ctest", str(tmp_path / "missing.xml")]) == 0
    assert "no results" in capsys.readouterr().out
