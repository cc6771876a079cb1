"""The files of one GPU conformance run (`_Run`): the case records, the queue and the device
description in the work folder, and the results file, its table and plot assembled from them.
Its own module so that the driver, the lanes and the prepare phase all use it without
importing one another."""
from __future__ import annotations

from pathlib import Path

from fact.conformance.corpus import load_json, write_json
from fact.conformance.gpu_case import SUITE, device_slug
from fact.conformance.gpu_report import plot_gpu, render_gpu_markdown, summarize_gpu


class _Run:
    """The files of one GPU run: the results stem in out_dir; case records, the queue, the
    device description and the logs in work_dir."""

    def __init__(self, out_dir: Path, work_dir: Path, date: str, variant: str):
        self.out_dir, self.work_dir, self.date, self.variant = Path(out_dir), Path(work_dir), date, variant
        self.cases_dir = self.work_dir / "cases"
        self.cases_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def device(self) -> dict:
        return load_json(self.work_dir / "device.json") or {"device": "unknown", "versions": {}}

    def stem(self) -> str:
        return f"{SUITE}-{device_slug(self.device()['device'])}-{self.date}" + (
            f"-{self.variant}" if self.variant else "")

    def record(self, index: int, case: dict) -> None:
        write_json(self.cases_dir / f"{index:03d}-{case['name']}.json", case)

    def cases(self) -> list[dict]:
        return [doc for doc in (load_json(p) for p in sorted(self.cases_dir.glob("*.json"))) if doc]

    def write(self, settings: dict, plot: bool = False) -> Path:
        """Assembles the results file (and its .md; the plot too when asked) from the case
        records so far; returns the JSON's path."""
        device = self.device()
        cases = self.cases()
        doc = {"suite": SUITE, "date": self.date, "device": device["device"],
               "versions": device.get("versions", {}), "settings": settings, "cases": cases,
               "summary": summarize_gpu(cases)}
        path = self.out_dir / f"{self.stem()}.json"
        write_json(path, doc)
        (self.out_dir / f"{self.stem()}.md").write_text(render_gpu_markdown(doc))
        if plot:
            problem = plot_gpu(doc, self.out_dir / f"{self.stem()}.png")
            if problem:
                print(f"plot: {problem}", flush=True)
        return path
