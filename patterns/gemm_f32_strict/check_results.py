#!/usr/bin/env python3
"""The strict kernels' standalone checks (check_rendered.sh) as a results file: parses the
checkers' outputs (one `<variant>.run.log` each) into JSON with the device and CUDA runtime
the checkers print, the driver release given (--driver), the CUTLASS version of the headers
the kernels were built with (--cutlass-include), and per variant and case
FACT's time, cuBLAS SGEMM's (the float32 baseline a user gets; TF32 alongside) measured in the
same process, the ratio, both relative errors against float64 and the verdict.

    python3 patterns/gemm_f32_strict/check_results.py OUT_DIR/strict-check -o RESULTS.json
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from datetime import date
from pathlib import Path

DEVICE = re.compile(r"^device: (?P<name>.+) \((?P<sms>\d+) SMs\), driver (?P<driver>\d+), runtime (?P<runtime>\d+)")
ROW = re.compile(r"^(?P<case>\w+)\s+(?P<shape>\S+)\s+(?P<fact_ms>\S+)\s+(?P<fact_tflops>\S+)\s+(?P<fact_err>\S+)\s+\|"
                 r"\s+(?P<sgemm_ms>\S+)\s+(?P<sgemm_tflops>\S+)\s+(?P<sgemm_err>\S+)\s+\|"
                 r"\s+(?P<tf32_ms>\S+)\s+(?P<tf32_tflops>\S+)\s+\|\s+(?P<ratio>\S+)\s+(?P<err_ratio>\S+)\s+(?P<verdict>\S+)")


def finite(text: str) -> float | None:
    """A number of the table; None for nan / inf (a case that did not run)."""
    value = float(text)
    return value if math.isfinite(value) else None


def cuda_version(code: str) -> str:
    value = int(code)
    return f"{value // 1000}.{value % 1000 // 10}"


def cutlass_version(include: Path) -> str | None:
    """CUTLASS_MAJOR.MINOR.PATCH of the headers the kernels were built with."""
    header = include / "cutlass" / "version.h"
    if not header.is_file():
        return None
    text = header.read_text(errors="replace")
    parts = [re.search(rf"#define CUTLASS_{part} (\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m[1] for m in parts) if all(parts) else None


def parse(log: Path) -> tuple[dict, dict]:
    """(device fields, {"variant", "kernel", "cases"}) of one checker's output."""
    device: dict = {}
    cases = []
    kernel = None
    for line in log.read_text(errors="replace").splitlines():
        if m := DEVICE.match(line):
            device = {"name": m["name"], "sms": int(m["sms"]),
                      "driver_cuda_api": cuda_version(m["driver"]),
                      "cuda_runtime": cuda_version(m["runtime"])}
        elif line.startswith("kernel: "):
            try:
                kernel = json.loads(line[len("kernel: "):])
            except json.JSONDecodeError:
                kernel = None
        elif m := ROW.match(line):
            if m["case"] == "case":
                continue
            fact_ms, sgemm_ms = finite(m["fact_ms"]), finite(m["sgemm_ms"])
            cases.append({"case": m["case"], "shape": m["shape"], "fact_ms": fact_ms,
                          "fact_rel_err": finite(m["fact_err"]), "baseline": "cublasSgemm",
                          "baseline_ms": sgemm_ms, "baseline_rel_err": finite(m["sgemm_err"]),
                          "cublas_tf32_ms": finite(m["tf32_ms"]),
                          "speedup_vs_baseline": sgemm_ms / fact_ms if fact_ms and sgemm_ms else None,
                          "verdict": m["verdict"]})
    return device, {"variant": log.name[:-len(".run.log")], "kernel": kernel, "cases": cases}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--driver", default=None, help="the driver release (nvidia-smi's driver_version)")
    parser.add_argument("--cutlass-include", type=Path, default=Path(".deps/cutlass/include"))
    parser.add_argument("--note", default=None, help="where the logs came from, when not this run")
    args = parser.parse_args(argv)
    device: dict = {}
    variants = []
    for log in sorted(args.folder.glob("*.run.log")):
        found, variant = parse(log)
        device = device or found
        variants.append(variant)
    doc = {"schema": "fact.bench.strict_check/1", "date": date.today().isoformat(), "device": device,
           "versions": {"driver": args.driver, "cuda": device.get("cuda_runtime"),
                        "cutlass": cutlass_version(args.cutlass_include),
                        "torch": None},  # the baseline is cuBLAS, called by the checker itself
           "precision": "strict (3xTF32) or tf32, as each kernel's spec says",
           "timer": "median of the checker's --reps runs, CUDA events, each after an L2 flush",
           "variants": variants}
    if args.note:
        doc["note"] = args.note
    args.output.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    print(f"wrote {args.output}: {len(variants)} variant(s), "
          f"{sum(len(v['cases']) for v in variants)} case(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
