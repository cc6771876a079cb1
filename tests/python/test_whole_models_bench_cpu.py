"""bench/whole_models/run_whole_models.py on the CPU at the CPU test sizes (--small): its main()
on GPT-2 (GPT2LMHeadModel) and torchvision's ViT, bf16, the FACT remainder eager (Inductor on 2
cores would compile each model for a while), torch.compile (default mode) as the one compiled
baseline. Checks the results file's shape (docs/architecture.md "Measuring": suite, date,
device, versions, cases with name / precision / status / fact_ms / rel_err / baselines /
speedup, a summary), that every case ran composed and is within the conformance bound of the
original in float64 (each output's error recomputed here from the file's numbers), and the
.md table beside it. About 45 s on 2 cores with a cold Inductor cache (marked slow: Inductor
compiles both models; scripts/run_tests.sh runs it)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fact.compose import engine_can_plan
from fact.conformance.corpus import output_bound

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "bench" / "whole_models" / "run_whole_models.py"

CAN_PLAN, WHY_NOT = engine_can_plan()


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench():
    return _load(SCRIPT, "run_whole_models")


def _results():
    """bench/whole_models/results.py: ratios, summary, merge, table."""
    return _load(SCRIPT.parent / "results.py", "whole_models_results")


@pytest.mark.slow
@pytest.mark.skipif(not CAN_PLAN, reason=f"no FACT engine to plan with: {WHY_NOT}")
def test_whole_models_bench_cpu(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("torchvision")
    bench = _bench()
    out_dir = tmp_path / "results"
    assert bench.main(["--device", "cpu", "--small", "--models", "gpt2,vit", "--remainder",
                       "eager", "--no-max-autotune", "--iters", "2", "--warmup", "1",
                       "--tag", "test", "--out-dir", str(out_dir),
                       "--work-dir", str(tmp_path / "work")]) == 0
    [path] = list(out_dir.glob("models-cpu-*-test.json"))
    doc = json.loads(path.read_text())
    assert {"suite", "date", "device", "versions", "settings", "cases", "summary"} <= set(doc)
    assert doc["suite"] == "models" and doc["device"] == "cpu"
    assert {"torch", "cutlass", "fact"} <= set(doc["versions"])
    assert doc["settings"]["precision"] == "native" and doc["settings"]["small"] is True
    assert [c["name"] for c in doc["cases"]] == ["gpt2", "vit"]

    for case in doc["cases"]:
        name = case["name"]
        assert case["status"] == "ok", f"{name}: {case.get('reason')} {case.get('errors')}"
        assert not case.get("partial")
        for key in ("precision", "fact_ms", "rel_err", "rel_errs", "baselines", "speedup",
                    "best_baseline", "coverage", "kernel_ratios", "optimize_s", "seconds",
                    "timing", "config", "runs"):
            assert key in case, f"{name}: no {key}"
        assert case["runs"].startswith("composed") and not case["fell_back"], case["runs"]
        assert case["coverage"]["composed"] > 0 and case["coverage"]["share"] > 0.5
        # FACT's error on every output, against the bound of conformance (from PyTorch's own)
        eager = case["rel_errs"]["torch_eager"]
        for key, error in case["rel_errs"]["fact"].items():
            bound = output_bound("native", eager[key])
            assert error <= bound, f"{name} {key}: FACT rel_err {error:.3g} > bound {bound:.2g}"
        assert case["rel_err"] == max(case["rel_errs"]["fact"].values())
        # the baselines: eager and torch.compile timed and right, max-autotune skipped
        for variant in ("torch_eager", "torch_compile"):
            entry = case["baselines"][variant]
            assert entry["ms"] > 0 and "error" not in entry, f"{name} {variant}: {entry}"
            assert entry["rel_err"] <= output_bound("native", None)
            assert case["speedup"][variant] == pytest.approx(entry["ms"] / case["fact_ms"])
        assert case["baselines"]["torch_compile"]["compile_s"] > 0
        assert "skipped" in case["baselines"]["torch_compile_max_autotune"]["error"]
        best = case["best_baseline"]
        assert best["ms"] == min(case["baselines"][v]["ms"] for v in ("torch_eager", "torch_compile"))
        # kernel ratios: one entry per composed replacement (the CPU path does not time them)
        ratios = case["kernel_ratios"]
        assert len(ratios["composed"]) == case["coverage"]["composed"]
        assert {"composed_summary", "declined_for_speed", "all_summary"} <= set(ratios)

    summary = doc["summary"]
    assert summary["models"] == 2 and summary["by_status"] == {"ok": 2}
    assert summary["geomean_vs_best_baseline"] > 0
    assert set(summary["gemm_flop_share"]) == {"gpt2", "vit"}
    table = path.with_suffix(".md").read_text()
    assert "| gpt2 |" in table and "| vit |" in table


def test_kernel_ratio_distribution():
    bench = _results()
    d = bench.distribution([2.0, 0.5, 1.0, None, 4.0])
    assert d["count"] == 4 and d["min"] == 0.5 and d["max"] == 4.0 and d["below_1"] == 1
    assert d["median"] == pytest.approx(1.5) and d["geomean"] == pytest.approx(2 ** 0.5)
    assert bench.distribution([]) == {"count": 0}


def test_sizes_override_rebuilds_the_model():
    bench = _bench()
    spec = bench.model_spec("gpt2", small=True, batch=3, sizes={"n_layer": 1})
    assert spec.batch == 3 and spec.sizes["n_layer"] == 1 and "1 layers" in spec.what
    assert len(spec.build().transformer.h) == 1
    full = bench.model_spec("llama", small=False)
    assert full.batch == 4 and full.sizes["hidden_size"] == 2048 and full.sizes["seq"] == 2048
    with pytest.raises(ValueError):
        bench.model_spec("vit", small=True, sizes={"no_such_size": 1})


def _case(name: str, fact_ms: float, runs: str, compile_ms: float | None, guard_compile_ms: float):
    """A results file's case as the bench writes it (the fields merge and summary read)."""
    compiled = {"ms": compile_ms, "rel_err": None}
    if compile_ms is None:
        compiled["error"] = "skipped: 10 s of the time budget left"
    return {"name": name, "status": "ok", "fact_ms": fact_ms, "runs": runs,
            "baselines": {"torch_eager": {"ms": 2 * fact_ms}, "torch_compile": compiled,
                          "torch_compile_max_autotune": {"ms": None}},
            "speedup": {"torch_eager": 2.0, **({"torch_compile": compile_ms / fact_ms} if compile_ms else {})},
            "best_baseline": {"name": "torch_eager", "ms": 2 * fact_ms, "speedup": 2.0},
            "speed_guard": {"original": "torch.compile of the original", "original_ms": guard_compile_ms},
            "coverage": {"share": 0.8, "gemm_flops": 100.0, "fact_flops": 80.0}}


def test_merge_takes_the_guards_compile_time_where_the_bench_skipped_it(tmp_path):
    bench = _results()
    header = {"suite": "models", "date": "2026-11-28", "device": "GPU X", "versions": {"fact": "a"},
              "settings": {}}
    first = tmp_path / "a.json"
    first.write_text(json.dumps({**header, "cases": [_case("gpt2", 1.0, "torch.compile of the original", None, 0.99)]}))
    second = tmp_path / "b.json"
    second.write_text(json.dumps({**header, "cases": [_case("bert", 1.0, "composed (1 ms)", 1.2, 1.25)]}))
    doc = bench.merge_results([first, second])
    gpt2, bert = doc["cases"]
    # skipped by the bench: the never-slower check's time, its source named, the best recomputed
    assert gpt2["baselines"]["torch_compile"]["ms"] == 0.99 and "error" not in gpt2["baselines"]["torch_compile"]
    assert "never-slower check" in gpt2["baselines"]["torch_compile"]["source"]
    assert gpt2["best_baseline"] == {"name": "torch_compile", "ms": 0.99, "speedup": pytest.approx(0.99)}
    # timed by the bench: kept as it was
    assert bert["baselines"]["torch_compile"]["ms"] == 1.2 and "source" not in bert["baselines"]["torch_compile"]
    summary = doc["summary"]
    assert summary["models"] == 2 and summary["vs_best_baseline"]["gpt2"] == pytest.approx(0.99)
    # the GEMM-FLOP share that runs: none where the check kept the original
    assert summary["gemm_flop_share_running"] == {"gpt2": 0.0, "bert": 0.8}
    assert [s["file"] for s in doc["sources"]] == ["a.json", "b.json"]
    other = tmp_path / "c.json"
    other.write_text(json.dumps({**header, "device": "GPU Y", "cases": []}))
    with pytest.raises(SystemExit):
        bench.merge_results([first, other])
