"""fact.optimize end to end on the CPU: the engine plans (in process), Python applies the plan
with the host reference. Regression tests (a chain of epilogue steps
composed to zeros; SwiGLU crashed; an MLP stack failed the FX lint), random epilogue
chains compared with the original module, the minGPT block; and what needs no engine: modules
that cannot be exported, tf32 on CPU inputs, the dynamo backend's options.

The tests that plan are skipped, with the reason, while the engine library does not export
fact_engine_plan; the apply side is covered engine-free by
test_apply_plan.py."""
import random
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fact
import fact.compose

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench" / "models"))
from llama_block import LlamaMLP  # noqa: E402
from mingpt_block import MinGPTBlock  # noqa: E402
from test_compose_plan import needs_engine_plan  # noqa: E402

LAUNCH = torch.ops.fact.launch.default
BATCH, SEQ_LEN, EMBED, HEADS = 2, 16, 64, 4


def small_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return MinGPTBlock(embed=EMBED, heads=HEADS, max_seq_len=SEQ_LEN).eval()


def _launches(composed) -> int:
    return sum(1 for n in composed.graph_module.graph.nodes if n.target is LAUNCH)


def _assert_matches(composed, module, make_input, seeds=(1, 2), rtol=1e-5, atol=1e-5):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the planned signature must not fall back
        for seed in seeds:
            torch.manual_seed(seed)
            x = make_input()
            got, want = composed(x), module(x)
            assert got.abs().max() > 0 or want.abs().max() == 0
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def _optimize(module, x, tmp_path, **options):
    options.setdefault("remainder", "eager")
    return fact.optimize(module, (x,), work_dir=tmp_path, **options)


# --- regressions: chains, SwiGLU, MLP stacks ------------------------------------------------


class ScaledHardtanhGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 48)

    def forward(self, x):
        return torch.nn.functional.gelu(torch.nn.functional.hardtanh(self.linear(x) * 0.5, -2.0, 2.0))


@needs_engine_plan
def test_a_chain_of_epilogue_steps_is_composed_exactly(tmp_path):
    torch.manual_seed(0)
    module = ScaledHardtanhGelu().eval()
    composed = _optimize(module, torch.randn(64, 32) * 4, tmp_path, precision="strict")
    report = composed.fact_report
    assert report.composed and all(c.verified for c in report.composed), str(report)
    _assert_matches(composed, module, lambda: torch.randn(64, 32) * 4)


@needs_engine_plan
def test_swiglu_composes_or_is_left_with_a_reason(tmp_path):
    torch.manual_seed(0)
    module = LlamaMLP(64, 160).eval()
    composed = _optimize(module, torch.randn(2, 8, 64), tmp_path, precision="strict")
    report = composed.fact_report
    assert report.composed or report.left_to_pytorch, str(report)
    _assert_matches(composed, module, lambda: torch.randn(2, 8, 64))


class GeluGatedMLP(torch.nn.Module):
    """GeGLU: down(gelu(gate(x)) * up(x)) + x (a residual the down GEMM carries)."""

    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        gated = torch.nn.functional.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x)
        return x + self.down_proj(gated)


@needs_engine_plan
@pytest.mark.parametrize("gate", ["silu", "gelu_tanh"])
def test_bf16_gated_mlp_composes_as_one_glu_gemm_and_the_down_gemm(tmp_path, gate):
    """SwiGLU as one GEMM on the CPU path: in bf16 the gate and up projections become one GEMM
    over their weights interleaved at plan time (a derived operand) with a glu epilogue, then
    the down GEMM; the composed module matches the original within bf16's tolerance."""
    torch.manual_seed(0)
    module = (LlamaMLP(64, 160) if gate == "silu" else GeluGatedMLP(64, 160)).to(torch.bfloat16).eval()
    make_input = lambda: torch.randn(2, 8, 64, dtype=torch.bfloat16)  # noqa: E731
    composed = _optimize(module, make_input(), tmp_path, precision="native")
    report = composed.fact_report
    assert len(report.composed) == 1, str(report)
    replacement = report.composed[0]
    assert replacement.rule == ("swiglu_mlp" if gate == "silu" else "geglu_mlp"), str(report)
    assert replacement.verified, str(report)
    assert len(replacement.calls) == 2, str(report)
    assert f"gemm_glu_{gate}" in replacement.calls[0].summary, str(report)
    assert replacement.derived and "interleaved" in replacement.derived[0], str(report)
    _assert_matches(composed, module, make_input, rtol=2e-2, atol=2e-2)


@needs_engine_plan
def test_float32_swiglu_keeps_gate_and_up_gemms(tmp_path):
    """In float32 (strict) the glu kernel does not apply: three GEMMs, still exact."""
    torch.manual_seed(0)
    module = LlamaMLP(64, 160).eval()
    composed = _optimize(module, torch.randn(2, 8, 64), tmp_path, precision="strict")
    report = composed.fact_report
    assert len(report.composed) == 1 and len(report.composed[0].calls) == 3, str(report)
    assert not report.composed[0].derived, str(report)
    _assert_matches(composed, module, lambda: torch.randn(2, 8, 64))


@needs_engine_plan
def test_an_mlp_stack_composes_in_a_valid_order(tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                 torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    composed = _optimize(module, torch.randn(8, 32), tmp_path, precision="strict")
    assert composed.fact_report.composed, str(composed.fact_report)
    composed.graph_module.graph.lint()
    _assert_matches(composed, module, lambda: torch.randn(8, 32))


@needs_engine_plan
@pytest.mark.parametrize("remainder", ["eager", "inductor"])
def test_the_signature_guard_alone_checks_a_call(tmp_path, monkeypatch, remainder):
    """The composed graph runs without torch.export's per-call input validation (its pre-forward
    hook, a Python check of every placeholder: the Inductor-compiled remainder called it on
    every call that is not a CUDA graph replay, training graphs included; the eager remainder
    calls the graph's forward, past its hooks): the composed module's own signature guard checks
    a call, so a call of another shape runs the original."""
    import torch.export._unlift as unlift
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    composed = _optimize(module, torch.randn(8, 32), tmp_path, precision="strict", remainder=remainder)
    assert composed.fact_report.composed, str(composed.fact_report)
    assert composed.fact_report.remainder.startswith(remainder), composed.fact_report.remainder
    validated = []
    original_check = unlift._check_input_constraints_for_module
    monkeypatch.setattr(unlift, "_check_input_constraints_for_module",
                        lambda *a, **k: validated.append(1) or original_check(*a, **k))
    _assert_matches(composed, module, lambda: torch.randn(8, 32))
    x = torch.randn(5, 32)
    with pytest.warns(UserWarning, match="running the original"):
        other = composed(x)
    torch.testing.assert_close(other, module(x))
    assert validated == [], "torch.export's input validation ran on a composed call"


STEPS = ("scale", "add_scalar", "relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh",
         "leaky_relu", "hardtanh", "residual", "multiply")


class RandomChain(torch.nn.Module):
    """Linear followed by a random chain of the epilogue steps a GEMM can carry."""

    def __init__(self, steps, width=32, out=48):
        super().__init__()
        self.linear = torch.nn.Linear(width, out)
        self.steps = steps

    def forward(self, x, other):
        y = self.linear(x)
        for kind, value in self.steps:
            if kind == "scale":
                y = y * value
            elif kind == "add_scalar":
                y = y + value
            elif kind == "residual":
                y = y + value * other
            elif kind == "multiply":
                y = y * other
            elif kind == "leaky_relu":
                y = torch.nn.functional.leaky_relu(y, abs(value))
            elif kind == "hardtanh":
                y = torch.nn.functional.hardtanh(y, -abs(value), abs(value))
            elif kind == "gelu_tanh":
                y = torch.nn.functional.gelu(y, approximate="tanh")
            elif kind == "gelu_erf":
                y = torch.nn.functional.gelu(y)
            else:
                y = getattr(torch, kind)(y) if kind != "silu" else torch.nn.functional.silu(y)
        return y


@needs_engine_plan
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(4))
def test_random_epilogue_chains_compose_like_the_original(tmp_path, dtype, seed):
    chooser = random.Random(seed)
    steps = [(chooser.choice(STEPS), round(chooser.uniform(0.25, 2.0), 3))
             for _ in range(chooser.randint(1, 5))]
    torch.manual_seed(seed)
    module = RandomChain(steps).to(dtype).eval()
    x, other = torch.randn(16, 32, dtype=dtype), torch.randn(16, 48, dtype=dtype)
    composed = fact.optimize(module, (x, other), None, work_dir=tmp_path, remainder="eager")
    report = composed.fact_report
    assert all(c.verified for c in report.composed), str(report)
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    with torch.no_grad():
        for fresh_seed in (1, 2):
            torch.manual_seed(fresh_seed)
            fresh = torch.randn(16, 32, dtype=dtype), torch.randn(16, 48, dtype=dtype)
            got, want = composed(*fresh), module(*fresh)
            error = ((got.double() - want.double()).norm() / want.double().norm()).item()
            assert error <= tolerance, (steps, error, str(report))


@needs_engine_plan
def test_the_mingpt_block_composes_and_matches_on_fresh_inputs(tmp_path):
    block = small_block()
    composed = _optimize(block, torch.randn(BATCH, SEQ_LEN, EMBED), tmp_path, precision="strict")
    report = composed.fact_report
    assert len(report.composed) >= 3 and _launches(composed) >= 4, str(report)
    assert all(c.verified for c in report.composed), str(report)
    _assert_matches(composed, block, lambda: torch.randn(BATCH, SEQ_LEN, EMBED))


# --- no engine needed ---------------------------------------------------------------------------


def test_unexportable_module_returns_a_working_module_with_the_reason():
    class DataDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            if x.sum() > 0:
                return self.linear(x)
            return x - 1

    module = DataDependent()
    x = torch.ones(4, 8)
    composed = fact.optimize(module, (x,), remainder="eager")
    assert composed.graph_module is None
    [item] = composed.fact_report.left_to_pytorch
    assert item.what == "module" and "cannot be exported" in item.reason
    with torch.no_grad():
        assert torch.equal(composed(x), module(x))
        assert torch.equal(composed(-x), module(-x))


def test_tf32_on_cpu_inputs_is_left_to_pytorch_with_the_reason():
    block = small_block()
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    composed = fact.optimize(block, (x,), precision="tf32")
    assert composed.graph_module is None
    assert "needs a GPU" in composed.fact_report.left_to_pytorch[0].reason
    with torch.no_grad():
        assert torch.equal(composed(x), block(x))


def test_unknown_precision_and_remainder_are_refused():
    with pytest.raises(ValueError, match="precision"):
        fact.optimize(torch.nn.Linear(4, 4), (torch.ones(2, 4),), precision="fp8")
    with pytest.raises(ValueError, match="remainder"):
        fact.optimize(torch.nn.Linear(4, 4), (torch.ones(2, 4),), remainder="jit")


def test_torch_compile_backend_fact_rejects_unknown_options():
    from fact.dynamo_backend import fact_backend

    with pytest.raises(ValueError, match="unknown option"):
        fact_backend(torch.fx.symbolic_trace(torch.nn.Identity()), [torch.ones(1)],
                     options={"precison": "tf32"})


@needs_engine_plan
def test_torch_compile_backend_fact_composes_the_dynamo_graph(tmp_path):
    from fact import dynamo_backend

    block = small_block()
    x = torch.randn(BATCH, SEQ_LEN, EMBED)
    torch._dynamo.reset()
    compiled = torch.compile(block, backend="fact", options={"work_dir": str(tmp_path),
                                                              "precision": "strict"})
    with torch.no_grad():
        got = compiled(x)
        want = block(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert dynamo_backend.reports[-1].composed, str(dynamo_backend.reports[-1])
