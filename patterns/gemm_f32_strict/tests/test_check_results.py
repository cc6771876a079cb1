"""check_results.py turns the strict kernels' standalone checker outputs into a results file:
device and versions, and per variant and case FACT's time against cuBLAS SGEMM's."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = """device: NVIDIA H200 (132 SMs), driver 13000, runtime 13000
kernel: {"kind":"gemm","name":"gemm_f32_strict_f32_nt_x_stagebt_3xtf32"}
layout: A col, B row, D row

case     shape                      fact_ms  TFLOP/s   rel_err |  sgemm_ms  TFLOP/s   rel_err |   tf32_ms  TFLOP/s | x_sgemm  err/sg verdict
check    3x(392x264x1000)            0.0887      7.0  2.64e-07 |    0.0439     14.1  5.68e-07 |    0.0238     26.1 |    0.50    0.46 PASS
square   1x(4096x4096x4096)          1.2598    109.1  3.17e-07 |    2.6533     51.8  8.10e-07 |    0.5323    258.2 |    2.11    0.39 PASS
largek   1x(256x256x524288)             nan      nan       inf |    1.2665     54.3  1.61e-06 |    0.3629    189.4 |     nan     inf FAIL(status)
         kernel returned status 3
"""


def test_every_case_of_every_variant_with_device_versions_and_ratio(tmp_path):
    (tmp_path / "gemm_f32_strict_f32_nt_x_stagebt_3xtf32.run.log").write_text(SAMPLE)
    include = tmp_path / "include" / "cutlass"
    include.mkdir(parents=True)
    (include / "version.h").write_text("#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH 0\n")
    out = tmp_path / "results.json"
    subprocess.run([sys.executable, str(ROOT / "patterns/gemm_f32_strict/check_results.py"), str(tmp_path),
                    "-o", str(out), "--driver", "580.159.04", "--cutlass-include", str(tmp_path / "include")],
                   check=True, capture_output=True)
    doc = json.loads(out.read_text())
    assert doc["device"]["name"] == "NVIDIA H200" and doc["device"]["sms"] == 132
    assert doc["versions"] == {"driver": "580.159.04", "cuda": "13.0", "cutlass": "4.2.0", "torch": None}
    (variant,) = doc["variants"]
    assert variant["variant"] == "gemm_f32_strict_f32_nt_x_stagebt_3xtf32"
    assert variant["kernel"]["name"] == variant["variant"]
    cases = {c["case"]: c for c in variant["cases"]}
    assert set(cases) == {"check", "square", "largek"}
    square = cases["square"]
    assert square["fact_ms"] == 1.2598 and square["baseline_ms"] == 2.6533 and square["baseline"] == "cublasSgemm"
    assert abs(square["speedup_vs_baseline"] - 2.6533 / 1.2598) < 1e-12
    assert square["fact_rel_err"] == 3.17e-07 and square["verdict"] == "PASS"
    assert cases["largek"]["verdict"] == "FAIL(status)"
    assert cases["largek"]["fact_ms"] is None and cases["largek"]["speedup_vs_baseline"] is None
