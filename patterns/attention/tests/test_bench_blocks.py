"""The block benchmark (patterns/attention/bench_blocks.py) on the CPU, without the engine or a GPU:
a package stand-in (a tiny block; load_package returns it wrapped with a FactReport, torch.compile
is a copy of the block) so that what is tested is the benchmark's own flow: every variant of a
case is built and verified first, then all of them are timed together in one interleaved timing
(fact.timing.time_cuda_interleaved on a GPU), every ms and ratio in the results file comes from
that one timing, and the variants are freed once the case is timed."""
from __future__ import annotations

import copy
import gc
import importlib.util
import json
import re
import sys
import weakref
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(REPO_ROOT / "python"))
sys.path.insert(0, str(REPO_ROOT / "patterns" / "attention"))

import bench_blocks  # noqa: E402
from fact.report import ComposedCall, ComposedReplacement, FactReport, LeftToPyTorch  # noqa: E402
from fact.timing import TimingStats  # noqa: E402

VARIANTS = ["torch_eager", "fact", "torch_compile", "fact_gemms_only", "fact_cuda_graphs"]


class TinyBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class FakeComposed(torch.nn.Module):
    """What load_package returns, as far as the benchmark reads it: a module with a fact_report."""

    def __init__(self, model, patterns, cuda_graphs, fail_after=None):
        super().__init__()
        self.original = model
        self.calls = 0
        self.fail_after = fail_after
        call = ComposedCall(label="fc", kind="gemm", summary="gemm 8x16x16", config="tile 64x64", kernel="k0")
        self.fact_report = FactReport(
            precision="strict", device="cpu", remainder="inductor",
            runs=f"composed graph (patterns {patterns}, cuda_graphs {cuda_graphs})",
            composed=[ComposedReplacement(id=0, label="fc", rule="gemm", pattern="gemm", nodes=["linear"],
                                          implementation="host reference", calls=[call], verified=True)],
            left_to_pytorch=[LeftToPyTorch(what="relu", reason="no pattern")])

    def forward(self, x):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("the captured graph went away")
        return self.original(x)


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package directory and the stand-ins; yields the list of FakeComposed modules loaded
    (weak references, so a test can check they were freed)."""
    package = tmp_path / "tinyblock_fp32"
    package.mkdir()
    (package / "package.json").write_text(json.dumps({"class_name": "TinyBlock", "dtype": "float32"}))
    loaded: list[weakref.ref] = []
    failing: set[str] = set()

    def build_packaged_model(package_dir, device="cpu"):
        torch.manual_seed(0)
        return TinyBlock().to(device).eval(), (torch.randn(8, 16, device=device),)

    def load_package(package_dir, device="cuda", *, inputs=None, patterns=None, speed_guard=True,
                     cuda_graphs=False, **_):
        assert speed_guard is False  # the composed module itself is timed, never its fallback
        model, _ = build_packaged_model(package_dir, device)
        # the verification runs it once; a "failing" variant raises from its next call (in the timing)
        composed = FakeComposed(model, patterns, cuda_graphs,
                                fail_after=1 if cuda_graphs and "cuda_graphs" in failing else None)
        loaded.append(weakref.ref(composed))
        return composed

    monkeypatch.setattr(bench_blocks, "build_packaged_model", build_packaged_model)
    monkeypatch.setattr(bench_blocks, "load_package", load_package)
    monkeypatch.setattr(bench_blocks, "_compiled", lambda model, inputs, mode: copy.deepcopy(model))
    return package, loaded, failing


def run_bench(package: Path, out_dir: Path, variants=VARIANTS) -> dict:
    assert bench_blocks.main(["--package", str(package), "--device", "cpu", "--out-dir", str(out_dir),
                              "--warmup", "1", "--iters", "4", "--variants", ",".join(variants)]) == 0
    (path,) = out_dir.glob("blocks-cpu-*.json")
    return json.loads(path.read_text())


def test_every_variant_is_timed_in_one_interleaved_timing(fake_package, tmp_path, monkeypatch, capsys):
    package, loaded, _ = fake_package
    calls = []
    real = bench_blocks.time_interleaved

    def spy(fns, device, warmup, iters, flusher):
        # every variant of the case built, verified and alive when the timing starts
        assert all(ref() is not None for ref in loaded)
        calls.append(list(fns))
        return real(fns, device, warmup, iters, flusher)

    monkeypatch.setattr(bench_blocks, "time_interleaved", spy)
    doc = run_bench(package, tmp_path / "out")
    assert calls == [VARIANTS]  # one timing, all variants, in the variants' order
    (case,) = doc["cases"]
    assert case["status"] == "ok" and case["skipped"] == {}
    assert list(case["timing"]) == VARIANTS
    timer = ("time.perf_counter, 1 warm-up + 4 timed runs (CPU), interleaved with "
             + ", ".join(VARIANTS) + " (order rotating each round)")
    assert all(stats["timer"] == timer and stats["runs"] == 4 for stats in case["timing"].values())
    # every ms in the case is the interleaved timing's median
    assert case["fact_ms"] == case["timing"]["fact"]["median_ms"]
    for key in ("torch_eager", "torch_compile"):
        assert case["baselines"][key]["ms"] == case["timing"][key]["median_ms"]
        assert case["baselines"][key]["rel_err"] < 1e-5
    assert case["ablation"]["all"]["ms"] == case["fact_ms"]
    assert case["ablation"]["gemms_only"]["ms"] == case["timing"]["fact_gemms_only"]["median_ms"]
    assert case["ablation"]["cuda_graphs"]["ms"] == case["timing"]["fact_cuda_graphs"]["median_ms"]
    assert case["rel_err"] < 1e-5 and case["verification"]["torch_rel_err"] < 1e-5
    assert case["config"] == "gemm 8x16x16: k0" and case["left_to_pytorch"] == ["relu: no pattern"]
    gc.collect()
    assert loaded and all(ref() is None for ref in loaded)  # freed once the case is timed
    out = capsys.readouterr().out
    assert re.search(r"TinyBlock_float32: built fact \(rel_err [0-9.e+-]+\)", out)
    (line,) = [text for text in out.splitlines() if "timed interleaved:" in text]
    assert line.split("timed interleaved: ")[1].split(", ")[0].startswith("torch_eager ")


def test_ratios_come_from_the_interleaved_timer(fake_package, tmp_path, monkeypatch):
    """The timer replaced by one that returns known medians: fact_ms, the baselines, speedups and
    each pattern's share are exactly those medians' ratios."""
    package, _, _ = fake_package
    medians = {"torch_eager": 4.0, "fact": 2.0, "torch_compile": 3.0, "fact_gemms_only": 3.0,
               "fact_cuda_graphs": 1.0}

    def timer(fns, device, warmup, iters, flusher):
        assert device.type == "cpu" and (warmup, iters) == (1, 4)
        return {key: TimingStats(medians[key], medians[key], medians[key], medians[key], medians[key], iters,
                                 "fake, interleaved with " + ", ".join(fns)) for key in fns}

    monkeypatch.setattr(bench_blocks, "time_interleaved", timer)
    (case,) = run_bench(package, tmp_path / "out")["cases"]
    assert case["fact_ms"] == 2.0
    assert case["speedup"] == {"torch_eager": 2.0, "torch_compile": 1.5}
    assert case["ablation"]["gemms_only"]["speedup_vs_eager"] == pytest.approx(4.0 / 3.0)
    assert case["ablation"]["gemms_only"]["share_of_saving"] == pytest.approx(0.5)
    assert all(s["timer"] == "fake, interleaved with " + ", ".join(VARIANTS) for s in case["timing"].values())


def test_a_variant_that_fails_while_timed_is_skipped_and_the_rest_timed_together(fake_package, tmp_path,
                                                                                monkeypatch):
    package, _, failing = fake_package
    failing.add("cuda_graphs")
    calls = []
    real = bench_blocks.time_interleaved
    monkeypatch.setattr(bench_blocks, "time_interleaved",
                        lambda fns, *args: (calls.append(list(fns)), real(fns, *args))[1])
    (case,) = run_bench(package, tmp_path / "out")["cases"]
    assert calls == [VARIANTS, [v for v in VARIANTS if v != "fact_cuda_graphs"]]
    assert case["skipped"] == {"fact_cuda_graphs": "failed while timed: RuntimeError: the captured graph went away"}
    assert "cuda_graphs" not in case["ablation"] and "fact_cuda_graphs" not in case["timing"]
    assert case["status"] == "ok"
    assert all("interleaved with torch_eager, fact, torch_compile, fact_gemms_only (" in s["timer"]
               for s in case["timing"].values())


def test_on_a_gpu_the_timing_is_time_cuda_interleaved(monkeypatch):
    """The dispatch alone (no GPU needed): a CUDA device goes to fact.timing.time_cuda_interleaved
    with the functions, warm-up, iterations and the L2 flusher unchanged."""
    seen = {}

    def fake(fns, warmup, iters, flusher):
        seen.update(names=list(fns), warmup=warmup, iters=iters, flusher=flusher)
        return {"marker": True}

    monkeypatch.setattr(bench_blocks, "time_cuda_interleaved", fake)
    flusher = object()
    fns = {"torch_eager": lambda: None, "fact": lambda: None}
    assert bench_blocks.time_interleaved(fns, torch.device("cuda"), 5, 20, flusher) == {"marker": True}
    assert seen == {"names": ["torch_eager", "fact"], "warmup": 5, "iters": 20, "flusher": flusher}


def test_cpu_rounds_rotate_the_order():
    order = []
    fns = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    stats = bench_blocks.time_interleaved(fns, torch.device("cpu"), 1, 3, bench_blocks.L2Flusher(0, "cpu"))
    assert order == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(s.runs == 3 and "interleaved with a, b, c" in s.timer for s in stats.values())


def test_no_ratio_compares_two_precisions():
    # A float32 block: FACT strict against eager float32, FACT planned in tf32 against eager with
    # TF32 allowed; neither against the other's baseline (a precision change is no speedup).
    case = {"precision": "strict", "fact_ms": 10.0, "speedup": {},
            "baselines": {"torch_eager": {"ms": 30.0}, "torch_compile": {"ms": 20.0},
                          "torch_eager_tf32": {"ms": 9.0}},
            "ablation": {"all": {"ms": 10.0, "precision": "strict"}, "tf32": {"ms": 3.0, "precision": "tf32"}}}
    bench_blocks.finish(case)
    assert case["speedup"] == {"torch_eager": 3.0, "torch_compile": 2.0}
    assert case["ablation"]["all"]["speedup_vs_eager"] == 3.0
    assert "speedup_vs_eager_tf32" not in case["ablation"]["all"]
    assert case["ablation"]["tf32"]["speedup_vs_eager_tf32"] == 3.0
    assert "speedup_vs_eager" not in case["ablation"]["tf32"]
