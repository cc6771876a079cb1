"""The GPU conformance report's readable table (fact.conformance.gpu_report.render_gpu_markdown):
cases whose composed module ran without the never-slower check are listed with the reason, so a
guard that silently failed (as on 2026-11-26, when it raised TypeError on every GPU case) shows
up in the table instead of only in a slower ratio."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_merge_takes_each_cases_last_measured_record_and_marks_older_ones():
    from fact.conformance.gpu_report import merge_results

    def case(name, status, speedup=None, precision="strict", dtype="float32"):
        record = {"name": name, "model": name.rsplit("-", 1)[0], "dtype": dtype, "precision": precision,
                  "status": status}
        if speedup is not None:
            record["speedup"] = {"torch_compile": speedup, "torch_eager": speedup}
        return record

    old = {"device": "NVIDIA H200", "date": "2026-11-26", "suite": "conformance",
           "cases": [case("a-float32", "ok", 1.5), case("b-float32", "ok", 2.5), case("c-float32", "skipped")]}
    new = {"device": "NVIDIA H200", "date": "2026-11-27", "suite": "conformance",
           "cases": [case("a-float32", "ok", 2.0), case("b-float32", "skipped"), case("d-float32", "ok", 3.0)]}
    doc = merge_results([old, new], ["old.json", "new.json"])
    by_name = {c["name"]: c for c in doc["cases"]}
    assert by_name["a-float32"]["speedup"]["torch_compile"] == 2.0 and "resumed_from" not in by_name["a-float32"]
    assert by_name["b-float32"]["status"] == "ok"  # a later skip never hides a measurement
    assert by_name["b-float32"]["resumed_from"] == "NVIDIA H200 2026-11-26"
    assert by_name["c-float32"]["status"] == "skipped"
    assert [c["name"] for c in doc["cases"]] == ["a-float32", "b-float32", "c-float32", "d-float32"]
    assert abs(doc["summary"]["geomean_vs_torch_compile"]["strict_float32"] - (2.0 * 2.5 * 3.0) ** (1 / 3)) < 1e-9
    assert doc["settings"]["merged_from"] == ["old.json", "new.json"]
    other = dict(new, device="NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match="different devices"):
        merge_results([old, other], ["old.json", "other.json"])
