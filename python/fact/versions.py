"""Versions every FACT results file names (docs/architecture.md): driver, CUDA, PyTorch,
CUTLASS (the headers the engine builds kernels against) and FACT (git sha)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import torch


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
