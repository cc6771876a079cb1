"""The GPU conformance report's readable table (fact.conformance.gpu_report.render_gpu_markdown):
cases whose composed module ran without the never-slower check are listed with the reason, so a
guard that silently failed (as on 2026-11-26, when it raised TypeError on every GPU case) shows
up in the table instead of only in a slower ratio."""
from __future__ import annotations

import json
from pathlib import Path

from fact.conformance.gpu_report import render_gpu_markdown

REPO_ROOT = Path(__file__).resolve().parents[2]


def _case(name: str, runs: str, speed_guard, notes=()):
    return {"name": name, "model": name.split("-")[0], "dtype": "bfloat16", "status": "ok", "runs": runs,
            "speed_guard": speed_guard, "notes": list(notes), "coverage": {}, "baselines": {}, "speedup": {}}


def test_composed_cases_without_the_guard_are_listed_with_its_note():
    doc = {"suite": "conformance", "device": "GPU", "date": "2026-11-27", "settings": {}, "cases": [
        _case("guarded-bfloat16", "composed (1 ms; torch.compile of the original 1.1 ms)",
              {"composed_ms": 1.0, "original_ms": 1.1}),
        _case("unguarded-bfloat16", "composed", None,
              ["never-slower check not done: TypeError: Model does not support len()"]),
        _case("fallback-bfloat16", "torch.compile of the original (nothing composed)", None),
    ]}
    text = render_gpu_markdown(doc)
    section = text.split("## Composed without the never-slower check", 1)[1].split("\n\n", 2)[1]
    assert "unguarded-bfloat16: never-slower check not done: TypeError" in section
    assert "guarded-bfloat16" not in section.replace("unguarded-bfloat16", "")
    assert "fallback-bfloat16" not in section


def test_the_committed_remeasure_lists_its_unguarded_cases():
    # In this file the guard did not run on any newly measured case: the four of them that ran
    # composed carry no timing; the resumed cases were measured with a working guard.
    path = REPO_ROOT / "bench/results/conformance-nvidia-h200-2026-11-26-remeasure.json"
    text = render_gpu_markdown(json.loads(path.read_text()))
    section = text.split("## Composed without the never-slower check", 1)[1].split("\n\n", 2)[1]
    listed = sorted(line.split(":")[0][2:] for line in section.splitlines() if line.startswith("- "))
    assert listed == ["epilogue_layer_scale_gate-bfloat16", "hf_phi3_decoder-bfloat16",
                      "mlp_swiglu_fused-bfloat16", "mlp_transformer_ffn-float32"], section
