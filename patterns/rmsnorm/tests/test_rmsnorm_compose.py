"""The rmsnorm pattern end to end on the CPU: fact.optimize plans (in process), Python applies the
plan with the engine's float64 host reference (the GEMM kind with its RowScale step), every
composed replacement is verified against the original subgraph run by PyTorch in float64 (the
norm's last nodes and the projections, on fresh random inputs), and the composed module matches
the original within bf16's tolerance. The fold is opt-in (README.md): the tests of the fold name
it in `patterns`; by default the norm is declined with the reason and the projections compose as
the other rules make them.

Models: patterns/rmsnorm/tests/rmsnorm_models.py (Llama's RMSNorm before q/k/v, with and without
biases, and before a SwiGLU MLP; the declined shapes) and the corpus' transformers
LlamaDecoderLayer at its CPU sizes, its norm weights randomized (transformers initializes them to
ones, which would hide a fold that forgot them)."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(REPO_ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))  # compose_testing: what the compose tests share

import fact  # noqa: E402
import fact.compose  # noqa: E402
from compose_testing import outputs as _outputs  # noqa: E402
from compose_testing import assert_matches as _assert_matches  # noqa: E402
from compose_testing import assert_within_float64_contract, corpus_model  # noqa: E402
from compose_testing import needs_engine_plan  # noqa: E402
from compose_testing import optimize_eagerly as _optimize  # noqa: E402
import rmsnorm_models as R  # noqa: E402


# A selection composes only what it names: the fold's tests name the patterns it folds into.
OPT_IN = ["rmsnorm", "gemm", "swiglu", "mlp"]
OPT_IN_BLOCK = ["rmsnorm", "gemm", "attention", "swiglu", "mlp"]
OPT_IN_REASON = "fused rmsnorm is opt-in"








def _rmsnorm_replacements(report):
    return [c for c in report.composed if c.pattern == "rmsnorm"]


LLAMA_TAIL = {"mul", "to_1", "mul_1"}  # x_f·rstd, its cast, g·...
CASES = {  # model, merged rule, calls, the norm's nodes it replaces
    "qkv": (lambda: R.NormQKV(), "rmsnorm_3_matches", 3, LLAMA_TAIL),
    "qkv_bias": (lambda: R.NormQKV(bias=True), "rmsnorm_3_matches", 3, LLAMA_TAIL),
    "swiglu_mlp": (lambda: R.NormSwiGLU(), "rmsnorm_swiglu_mlp", 2, LLAMA_TAIL),
    # g = 1 + w computed in forward: folded as W·diag(1 + w)
    "offset_weight": (lambda: R.NormComputedWeight(R.one_plus_weight), "rmsnorm_gemm", 1, LLAMA_TAIL),
    # Gemma: x_f·rstd, ·(1 + w.float()) in float32, then the cast back
    "gemma_qkv": (lambda: R.GemmaNormQKV(), "rmsnorm_3_matches", 3, {"mul", "mul_1", "type_as"}),
}


@needs_engine_plan
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_norm_folds_into_its_projections(name, tmp_path):
    make, rule, calls, tail = CASES[name]
    torch.manual_seed(0)
    module = make().to(torch.bfloat16).eval()
    make_inputs = lambda: [torch.randn(2, 16, 64, dtype=torch.bfloat16)]  # noqa: E731
    composed = _optimize(module, make_inputs(), tmp_path, patterns=OPT_IN)
    report = composed.fact_report
    norms = _rmsnorm_replacements(report)
    assert len(norms) == 1 and norms[0].rule == rule and norms[0].verified, str(report)
    assert len(norms[0].calls) == calls, str(report)
    assert "row_scale" in norms[0].calls[0].summary, str(report)
    assert norms[0].derived and all("RMSNorm weight folded" in d for d in norms[0].derived), str(report)
    # The norm's statistics stay PyTorch's (rsqrt); its last nodes are replaced.
    assert tail <= set(norms[0].nodes) and "rsqrt" not in norms[0].nodes, str(report)
    _assert_matches(composed, module, make_inputs)


@needs_engine_plan
@pytest.mark.parametrize("patterns", [None, ["gemm", "swiglu", "mlp"]], ids=["no_selection", "without_rmsnorm"])
def test_by_default_the_norm_is_declined_and_the_projections_are_composed_as_usual(patterns, tmp_path):
    torch.manual_seed(0)
    module = R.NormQKV().to(torch.bfloat16).eval()
    make_inputs = lambda: [torch.randn(2, 16, 64, dtype=torch.bfloat16)]  # noqa: E731
    composed = _optimize(module, make_inputs(), tmp_path, patterns=patterns)
    report = composed.fact_report
    assert not _rmsnorm_replacements(report), str(report)
    declined = [item for item in report.left_to_pytorch if "rmsnorm" in item.what]
    assert len(declined) == 1 and OPT_IN_REASON in declined[0].reason, str(report)
    gemms = [c for c in report.composed if c.pattern == "gemm"]
    assert len(gemms) == 3 and all(g.verified and not g.derived for g in gemms), str(report)
    _assert_matches(composed, module, make_inputs)


@needs_engine_plan
def test_the_folded_projection_is_as_close_to_float64_as_pytorchs_bf16(tmp_path):
    """The fold rounds W·g once to bf16 and scales the float32 accumulator by rstd; PyTorch rounds
    x·rstd and g·(x·rstd) to bf16. Both are rounding-level; the fold must not be worse than twice
    PyTorch's own error against the float64 model (in practice it is about as close)."""
    torch.manual_seed(0)
    module = R.NormQKV().to(torch.bfloat16).eval()
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    composed = _optimize(module, [x], tmp_path, patterns=OPT_IN)
    assert _rmsnorm_replacements(composed.fact_report), str(composed.fact_report)
    with torch.no_grad():
        references = module.double()(x.double())
        module.to(torch.bfloat16)
        for ours, theirs, reference in zip(composed(x), module(x), references):
            ours_err = (ours.double() - reference).norm() / reference.norm()
            pytorch_err = (theirs.double() - reference).norm() / reference.norm()
            assert ours_err <= 2 * pytorch_err + 1e-4, (float(ours_err), float(pytorch_err))


DECLINED = {
    "also_returned": (lambda: R.NormAlsoReturned(), torch.bfloat16, "native", "also read by"),
    "other_dim": (lambda: R.NormOverOtherDim(), torch.bfloat16, "native", "not the last"),
    "computed_weight": (lambda: R.NormComputedWeight(R.exp_weight), torch.bfloat16, "native", "computed by the graph"),
    "float32_strict": (lambda: R.NormQKV(), torch.float32, "strict", "dtype float32"),
}


@needs_engine_plan
@pytest.mark.parametrize("name", sorted(DECLINED))
def test_what_the_fold_cannot_take_is_declined_and_correct(name, tmp_path):
    make, dtype, precision, reason = DECLINED[name]
    torch.manual_seed(0)
    module = make().to(dtype).eval()
    make_inputs = lambda: [torch.randn(2, 16, 64, dtype=dtype)]  # noqa: E731
    composed = _optimize(module, make_inputs(), tmp_path, precision=precision, patterns=OPT_IN)
    report = composed.fact_report
    assert not _rmsnorm_replacements(report), str(report)
    declined = [item for item in report.left_to_pytorch if "rmsnorm" in item.what]
    assert declined and reason in declined[0].reason, str(report)
    assert any(c.pattern == "gemm" for c in report.composed), str(report)
    _assert_matches(composed, module, make_inputs, tol=2e-2 if dtype == torch.bfloat16 else 1e-5)


@needs_engine_plan
@pytest.mark.parametrize("patterns", [OPT_IN_BLOCK, ["rope", *OPT_IN_BLOCK]], ids=["rmsnorm", "rmsnorm_and_rope"])
def test_transformers_llama_decoder_folds_both_norms(patterns, tmp_path):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    module, make_inputs = corpus_model("hf_llama_decoder")
    with torch.no_grad():
        for norm in (module.layer.input_layernorm, module.layer.post_attention_layernorm):
            norm.weight.normal_(1.0, 0.25)
    composed = _optimize(module, make_inputs(), tmp_path, patterns=patterns)
    report = composed.fact_report
    norms = _rmsnorm_replacements(report)
    assert len(norms) == 2 and all(n.verified for n in norms), str(report)
    assert {n.rule for n in norms} == {"rmsnorm_3_matches", "rmsnorm_swiglu_mlp"}, str(report)
    if "rope" in patterns:
        attention_input = next(n for n in norms if n.rule == "rmsnorm_3_matches")
        assert sum("rope" in call.summary for call in attention_input.calls) == 2, str(report)
    assert not [item for item in report.left_to_pytorch if "rmsnorm" in item.what], str(report)
    assert_within_float64_contract(composed, module, make_inputs)


@needs_engine_plan
def test_transformers_gemma_decoder_folds_both_norms(tmp_path):
    """GemmaRMSNorm (the weight in float32 as 1 + w, then the cast) folds into q/k/v and into the
    GeGLU MLP's interleaved gate/up weight."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    module, make_inputs = corpus_model("hf_gemma_decoder")
    with torch.no_grad():
        for norm in (module.layer.input_layernorm, module.layer.post_attention_layernorm):
            norm.weight.normal_(0.0, 0.25)  # transformers initializes Gemma's to zeros (g = 1)
    composed = _optimize(module, make_inputs(), tmp_path, patterns=OPT_IN_BLOCK)
    report = composed.fact_report
    norms = _rmsnorm_replacements(report)
    assert len(norms) == 2 and all(n.verified for n in norms), str(report)
    assert any("w + 1" in d for n in norms for d in n.derived), str(report)
    assert not [item for item in report.left_to_pytorch if "rmsnorm" in item.what], str(report)
    assert_within_float64_contract(composed, module, make_inputs, close_to_module=None)


# GPU (marked `gpu`, skipped elsewhere): the fold at the Llama-3-8B layer's sizes (hidden 4096,
# q 4096, k/v 1024, intermediate 14336; 2 sequences of 2048 tokens) through fact.optimize with
# the realized sm_90a kernels. Every replacement is verified by the executor against the float64
# run of the subgraph it replaces (fresh random inputs, outputs poisoned first, every element
# compared); the composed module is then compared with the float64 model.
GPU_CASES = {
    "qkv": lambda: R.NormQKV(hidden=4096, q_out=4096, kv_out=1024),
    "swiglu_mlp": lambda: R.NormSwiGLU(hidden=4096, intermediate=14336),
}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU tests run on the device host)")
@needs_engine_plan
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_the_fold_runs_verified_kernels_at_llama_size_on_the_gpu(name, tmp_path):
    torch.manual_seed(0)
    module = GPU_CASES[name]().to("cuda", torch.bfloat16).eval()
    make_input = lambda: torch.randn(2, 2048, 4096, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    composed = fact.optimize(module, (make_input(),), "native", remainder="eager", work_dir=tmp_path,
                             speed_guard=False, patterns=OPT_IN)
    report = composed.fact_report
    norms = _rmsnorm_replacements(report)
    assert len(norms) == 1, str(report)
    entry = norms[0]
    assert entry.implementation == "kernels" and entry.verified, str(report)
    assert entry.rel_err <= entry.tolerance, str(report)
    assert all(call.config and call.kernel for call in entry.calls), str(report)
    x = make_input()
    with torch.no_grad():
        got = _outputs(composed(x))
        want = _outputs(module(x))
        reference = _outputs(module.double()(x.double()))
    for ours, theirs, exact in zip(got, want, reference):
        ours_err = ((ours.double() - exact).norm() / exact.norm()).item()
        pytorch_err = ((theirs.double() - exact).norm() / exact.norm()).item()
        assert ours_err < 2e-2 and ours_err <= 2 * pytorch_err + 1e-4, (ours_err, pytorch_err)
