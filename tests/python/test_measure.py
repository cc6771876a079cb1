"""fact.measure: the end-to-end check `fact optimize` prints. CPU: the float64 verification,
the table rendering and the no-GPU exit; GPU (marked): a package of a small model measured."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fact.measure
from test_compose_plan import TINY_MODEL, _python_env, needs_engine_plan  # the packaged tiny model

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_verify_measures_both_modules_against_float64_on_fresh_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    inputs = (torch.randn(16, 32),)

    class Halved(torch.nn.Module):  # a "composed" module that is wrong by a known factor
        def forward(self, x):
            return model(x) * 0.5

    check = fact.measure.verify(model, Halved(), inputs, seed=5)
    assert check["seed"] == 5
    assert check["torch_rel_err"] < 1e-6
    assert check["fact_rel_err"] == pytest.approx(0.5, rel=1e-4)
    again = fact.measure.verify(model, model, inputs, seed=6)
    assert again["fact_rel_err"] == again["torch_rel_err"]


class ClosureBlock(torch.nn.Module):
    """minGPT's MLP: forward calls a lambda that closes over submodules."""

    def __init__(self, width=16):
        super().__init__()
        self.mlp = torch.nn.ModuleDict(dict(c_fc=torch.nn.Linear(width, 4 * width),
                                            c_proj=torch.nn.Linear(4 * width, width),
                                            act=torch.nn.GELU(approximate="tanh")))
        self.register_buffer("scale", torch.full((width,), 0.5))
        m = self.mlp
        self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))

    def forward(self, x):
        return x + self.mlpf(x) * self.scale


def test_the_float64_reference_runs_modules_that_reach_submodules_through_closures():
    torch.manual_seed(0)
    model = ClosureBlock().to(torch.bfloat16)
    before = {name: (t, t.dtype, t.data_ptr()) for name, t in
              [*model.named_parameters(), *model.named_buffers()]}
    values = {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}
    inputs = (torch.randn(4, 16, dtype=torch.bfloat16),)
    check = fact.measure.verify(model, model, inputs, seed=3)
    assert 0 < check["torch_rel_err"] < 2e-2 and check["fact_rel_err"] == check["torch_rel_err"]
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        original, dtype, address = before[name]
        assert tensor is original and tensor.dtype == dtype == torch.bfloat16, name
        assert tensor.data_ptr() == address and torch.equal(tensor, values[name]), name


def test_the_float64_conversion_is_undone_when_the_run_raises():
    model = ClosureBlock().to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="inside"):
        with fact.measure.float64_in_place(model):
            assert model.mlp.c_fc.weight.dtype == torch.float64 and model.scale.dtype == torch.float64
            raise RuntimeError("inside")
    assert {t.dtype for t in [*model.parameters(), *model.buffers()]} == {torch.bfloat16}


def test_markdown_lists_every_variant_with_its_speedup_and_failures():
    stats = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.2, "timer": "CUDA events"}
    doc = {"device": "NVIDIA H200", "cases": [{
        "precision": "native", "remainder": "inductor", "left_to_pytorch": ["attention: pending"],
        "timing": {"fact": stats, "torch_eager": {**stats, "median_ms": 3.0},
                   "torch_compile_max_autotune": {"error": "RuntimeError: no"}},
        "speedup": {"torch_eager": 3.0},
        "verification": {"seed": 1, "fact_rel_err": 2e-3, "torch_rel_err": 3e-3}}]}
    text = fact.measure.render_markdown(doc)
    assert "| torch_eager | 3.000 | 0.900–1.200 | 3.00x |" in text
    assert "| torch_compile_max_autotune | – | – | failed: RuntimeError: no |" in text
    assert text.index("torch_eager") < text.index("FACT (composed)")
    assert "FACT rel_err 0.002, PyTorch 0.003" in text and "attention: pending" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
def test_without_a_gpu_it_says_so_and_measures_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fact.measure", str(tmp_path / "pkg"), "-o", str(tmp_path)],
                          capture_output=True, text=True, env=_python_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "no CUDA GPU here" in done.stdout
    assert not (tmp_path / "e2e.json").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Hopper) for FACT kernels")
@needs_engine_plan
def test_a_package_is_verified_and_timed_end_to_end(tmp_path):
    model_file = tmp_path / "tiny_mlp.py"
    model_file.write_text(TINY_MODEL)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "fact.package", f"{model_file}:TinyMLP", "-o", str(out),
                    "--device", "cuda", "--precision", "tf32"], check=True, env=_python_env(), timeout=900)
    subprocess.run([sys.executable, "-m", "fact.measure", str(out / "fact_tinymlp"), "-o", str(out),
                    "--no-max-autotune", "--iters", "5"], check=True, env=_python_env(), timeout=900)
    doc = json.loads((out / "e2e.json").read_text())
    case = doc["cases"][0]
    assert doc["suite"] == "e2e" and doc["versions"]["torch"] == torch.__version__
    assert case["fact_ms"] > 0 and case["speedup"]["torch_eager"] > 0
    assert case["rel_err"] < 5e-3, case["verification"]
    assert "FACT (composed)" in (out / "e2e.md").read_text()
