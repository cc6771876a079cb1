"""The composition benchmark's results file, in the shape every FACT benchmark writes
(DESIGN.md, "Measuring"; include/fact/realize/bench_results.hpp):

    {"suite": "compose", "date", "device", "versions": {driver, cuda, torch, cutlass, fact, ...},
     "cases": [{"name", "precision", "status", "fact_ms", "rel_err",
                "baselines": {name: {"ms", "rel_err", ...spread}}, "speedup": {name: ms / fact_ms},
                "config", "reason" (when status is not "ok"), "stage", ...stage-specific keys}],
     "stages": {stage: {"status", "seconds", "reason"}}, "setup": {...}, "reports": {...}}

Cases carry extra keys per stage (e.g. "verification", "timing", "composed"); tools that read
any suite use only the common ones.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

SUITE = "compose"


def device_slug(device_name: str) -> str:
    """"NVIDIA H200" -> "nvidia-h200" (as fact::realize::device_slug)."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or "unknown-device"


def _first_line_of(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    return lines[0].strip() if lines else ""


def cutlass_version() -> str:
    """CUTLASS version of the headers the engine builds kernels against: $FACT_CUTLASS_DIR's
    include/cutlass/version.h, else the installed nvidia-cutlass package, else "unknown"."""
    root = os.environ.get("FACT_CUTLASS_DIR", "")
    header = Path(root) / "include" / "cutlass" / "version.h" if root else None
    if header is not None and header.is_file():
        text = header.read_text(errors="replace")
        parts = [re.search(rf"#define\s+CUTLASS_{name}\s+(\d+)", text) for name in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(p.group(1) for p in parts)
    try:
        from importlib.metadata import version

        return f"nvidia-cutlass {version('nvidia-cutlass')}"
    except Exception:  # noqa: BLE001 - any lookup failure means unknown
        return "unknown"


def fact_version() -> str:
    """$FACT_GIT_SHA (set by the device scripts), else this checkout's short HEAD."""
    given = os.environ.get("FACT_GIT_SHA", "")
    if given and given != "unknown":
        return given
    head = _first_line_of(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"])
    return head or "unknown"


def collect_versions(device: torch.device) -> dict:
    versions = {
        "driver": "n/a", "cuda": torch.version.cuda or "n/a", "torch": torch.__version__,
        "cutlass": cutlass_version(), "fact": fact_version(),
    }
    if device.type == "cuda":
        versions["driver"] = _first_line_of(["nvidia-smi", "--query-gpu=driver_version",
                                             "--format=csv,noheader", "-i", str(device.index or 0)]) or "unknown"
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    return versions


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def make_case(name: str, precision: str, stage: str, *, fact_ms: float | None = None,
              rel_err: float | None = None, baselines: dict[str, dict] | None = None,
              config: str = "", status: str = "ok", reason: str = "", **extra: Any) -> dict:
    """One case; speedup[b] = baselines[b]["ms"] / fact_ms for every baseline with a time."""
    baselines = baselines or {}
    speedup = {b: entry["ms"] / fact_ms for b, entry in baselines.items()
               if fact_ms and entry.get("ms")}
    case = {"name": name, "precision": precision, "status": status, "fact_ms": fact_ms,
            "rel_err": rel_err, "baselines": baselines, "speedup": speedup, "config": config,
            "stage": stage}
    if status != "ok":
        case["reason"] = reason
    case.update(extra)
    return case


class ResultsFile:
    """The results document, rewritten (atomically) whenever a stage adds to it."""

    def __init__(self, out_dir: Path, device: torch.device, setup: dict, date: str | None = None,
                 variant: str = ""):
        self.date = date or time.strftime("%Y-%m-%d", time.gmtime())
        self.doc: dict = {
            "suite": SUITE, "date": self.date, "device": device_name(device),
            "versions": collect_versions(device), "cases": [], "stages": {}, "setup": setup,
            "reports": {},
        }
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # "<suite>-<device>-<date>", or "...-<date>-<variant>" for a partial run (as the GEMM suite)
        self.stem = f"{SUITE}-{device_slug(self.doc['device'])}-{self.date}" + (f"-{variant}" if variant else "")
        if variant:
            self.doc["variant"] = variant

    @property
    def json_path(self) -> Path:
        return self.out_dir / f"{self.stem}.json"

    @property
    def report_path(self) -> Path:
        return self.out_dir / f"{self.stem}.md"

    def add_case(self, case: dict) -> None:
        self.doc["cases"].append(case)

    def add_report(self, label: str, report: dict) -> None:
        self.doc["reports"][label] = report

    def set_stage(self, stage: str, status: str, seconds: float, reason: str = "") -> None:
        self.doc["stages"][stage] = {"status": status, "seconds": round(seconds, 2), "reason": reason}

    def write(self) -> Path:
        temporary = self.json_path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self.doc, indent=2, default=str) + "\n")
        temporary.replace(self.json_path)
        return self.json_path
