"""The composition benchmark's results file, in the shape every FACT benchmark writes
(docs/architecture.md, "Measuring"; include/fact/realize/bench_results.hpp):

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
import re
import time
from pathlib import Path
from typing import Any

import torch

from fact.versions import collect_versions

SUITE = "compose"


def device_slug(device_name: str) -> str:
    """"NVIDIA H200" -> "nvidia-h200" (as fact::realize::device_slug)."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or "unknown-device"


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
