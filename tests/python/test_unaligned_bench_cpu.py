"""bench/gemm_unaligned/run_unaligned.py's setup on the CPU: each case's module and inputs built
at small sizes (shapes, dtypes, precision, fresh inputs), the results row (speedups against each
baseline and the fastest one, the status from the error bound), the summary, and main()'s exit
without a CUDA GPU. No fact.optimize and no timing here: the GPU run is scripts/
device_parallel.sh's `unaligned` job."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "bench" / "gemm_unaligned" / "run_unaligned.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("run_unaligned", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


@pytest.mark.parametrize("m, n, k", [(37, 29, 53), (5, 3, 7)])
def test_strict_product_case_is_float32_x_at_w(m, n, k):
    case = bench.strict_product_case(m=m, n=n, k=k, device="cpu")
    assert (case.name, case.precision, case.dtype) == (f"f32_strict_{m}x{n}x{k}", "strict", torch.float32)
    assert case.gemm == {"m": m, "n": n, "k": k}
    [x] = case.inputs
    assert x.shape == (m, k) and x.dtype == torch.float32
    assert case.module.weight.shape == (k, n) and case.module.weight.dtype == torch.float32
    assert not case.module.training
    with torch.no_grad():
        assert torch.equal(case.module(x), x @ case.module.weight)
    assert case.shape() == {"m": m, "n": n, "k": k, "inputs": [[m, k]], "parameters": {"weight": [k, n]}}


@pytest.mark.parametrize("batch, seq, in_features, out_features", [(2, 8, 70, 64), (1, 3, 13, 9)])
def test_bf16_linear_case(batch, seq, in_features, out_features):
    case = bench.bf16_linear_case(batch=batch, seq=seq, in_features=in_features,
                                  out_features=out_features, device="cpu")
    assert (case.name, case.precision, case.dtype) == (f"bf16_linear_k{in_features}", "native", torch.bfloat16)
    assert isinstance(case.module, torch.nn.Linear) and case.module.bias is not None
    assert case.module.weight.shape == (out_features, in_features)
    assert case.module.weight.dtype == case.module.bias.dtype == torch.bfloat16
    [x] = case.inputs
    assert x.shape == (batch, seq, in_features) and x.dtype == torch.bfloat16
    assert case.gemm == {"m": batch * seq, "n": out_features, "k": in_features}


@pytest.mark.parametrize("batch, seq, embed, vocab", [(2, 8, 64, 257), (1, 4, 16, 31)])
def test_bf16_lm_head_case_has_no_bias(batch, seq, embed, vocab):
    case = bench.bf16_lm_head_case(batch=batch, seq=seq, embed=embed, vocab=vocab, device="cpu")
    assert (case.name, case.precision, case.dtype) == (f"bf16_lm_head_{vocab}", "native", torch.bfloat16)
    assert isinstance(case.module, torch.nn.Linear) and case.module.bias is None
    assert case.module.weight.shape == (vocab, embed) and case.module.weight.dtype == torch.bfloat16
    [x] = case.inputs
    assert x.shape == (batch, seq, embed) and x.dtype == torch.bfloat16
    with torch.no_grad():
        assert case.module(x).shape == (batch, seq, vocab)


def test_fresh_inputs_have_the_example_shapes_and_new_values():
    case = bench.strict_product_case(m=9, n=5, k=7, device="cpu")
    [fresh] = case.fresh_inputs(bench.FRESH_SEED)
    [again] = case.fresh_inputs(bench.FRESH_SEED)
    [example] = case.inputs
    assert fresh.shape == example.shape and fresh.dtype == example.dtype
    assert not torch.equal(fresh, example) and torch.equal(fresh, again)


def test_the_full_size_builders_are_the_goal_shapes():
    assert list(bench.CASE_BUILDERS) == ["f32_strict_8205x2949x5921", "bf16_linear_k770",
                                         "bf16_lm_head_50257"]
    assert bench.parse_args([]).cases == list(bench.CASE_BUILDERS)
    with pytest.raises(SystemExit):
        bench.parse_args(["--cases", "f32_strict_8205x2949x5921,nonesuch"])


def _info(**extra):
    return {"name": "case", "precision": "strict", "status": "", "reason": "", **extra}


def test_results_row_ratios_and_the_fastest_baseline():
    row = bench.results_row(_info(), 2.0,
                            {"torch_eager": 5.0, "torch_compile": 4.0, "torch_compile_max_autotune": 3.0},
                            {"fact": 1e-7, "torch_eager": 2e-6}, 1e-5)
    assert row["speedup"] == {"torch_eager": 2.5, "torch_compile": 2.0, "torch_compile_max_autotune": 1.5}
    assert row["vs_best"] == {"name": "torch_compile_max_autotune", "ms": 3.0, "speedup": 1.5}
    assert row["baselines"]["torch_eager"] == {"ms": 5.0, "rel_err": 2e-6}
    assert row["baselines"]["torch_compile"] == {"ms": 4.0, "rel_err": None}
    assert (row["status"], row["fact_ms"], row["rel_err"], row["bound"]) == ("ok", 2.0, 1e-7, 1e-5)


def test_results_row_leaves_out_a_baseline_not_timed():
    row = bench.results_row(_info(), 4.0, {"torch_eager": 2.0, "torch_compile": None},
                            {"fact": 1e-3}, 2e-2)
    assert row["speedup"] == {"torch_eager": 0.5}
    assert row["vs_best"] == {"name": "torch_eager", "ms": 2.0, "speedup": 0.5}
    assert row["baselines"]["torch_compile"]["ms"] is None


@pytest.mark.parametrize("fact_err, status", [(2e-5, "wrong"), (math.nan, "wrong"), (math.inf, "wrong"),
                                              (1e-5, "ok"), (None, "unverified")])
def test_results_row_status_from_the_bound(fact_err, status):
    row = bench.results_row(_info(), 1.0, {"torch_compile": 2.0}, {"fact": fact_err}, 1e-5)
    assert row["status"] == status


def test_results_row_without_fact_time_and_a_failed_case():
    untimed = bench.results_row(_info(), None, {"torch_compile": 2.0}, {"fact": 1e-6}, 1e-5)
    assert untimed["status"] == "not timed" and untimed["speedup"] == {} and untimed["vs_best"] is None
    failed = bench.results_row(_info(status="failed", reason="optimize: boom"), None,
                               {"torch_compile": 2.0}, {}, 1e-5)
    assert (failed["status"], failed["reason"]) == ("failed", "optimize: boom")


def test_summary_and_summary_line():
    ok = bench.results_row(_info(name="a", report={"runs": "composed", "composed": [
        {"note": "K padded 5921\u21925924, N padded 2949\u21922952"}]}), 2.0,
        {"torch_eager": 5.0, "torch_compile": 4.0}, {"fact": 1e-7, "torch_eager": 2e-6}, 1e-5)
    wrong = bench.results_row(_info(name="b"), 1.0, {"torch_compile": 1.0}, {"fact": 1.0}, 1e-5)
    summary = bench.summarize([ok, wrong, {"name": "c", "status": "failed"}])
    assert summary["vs_best"] == {"a": 2.0, "b": 1.0, "c": None}
    assert summary["vs_torch_compile"] == {"a": 2.0, "b": 1.0, "c": None}
    assert (summary["wrong"], summary["failed"], summary["interrupted"]) == (["b"], ["c"], [])
    line = bench.summary_line(ok)
    assert line.startswith("a [ok]: fact 2 ms") and "vs best (torch_compile) 2.00x" in line
    assert "runs: composed" in line and "K padded 5921\u21925924" in line


def test_default_results_path_names_the_device_and_date():
    path = bench.default_out_path("NVIDIA H200", "2026-12-01")
    assert path == REPO_ROOT / "bench" / "results" / "unaligned-nvidia-h200-2026-12-01.json"


def test_main_without_a_cuda_gpu_exits_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "results.json"
    assert bench.main(["--out", str(out)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not out.exists()
