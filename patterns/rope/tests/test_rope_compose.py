"""The rope pattern end to end on the CPU: fact.optimize plans (in process), Python applies the
plan with the engine's float64 host reference (the Rope step of the GEMM kind), every composed
replacement is verified against the original subgraph run by PyTorch in float64, and the composed
module matches the original within bf16's tolerance, returning the rotated tensor with the
strides the original consumers saw. The fusion is opt-in (README.md): the tests of the fusion
name it in `patterns`; by default the rope is declined with the measured reason and the
projection is composed as a plain GEMM.

Models: patterns/rope/tests/rope_models.py (the rotate-half form with and without a q bias and a
transpose, GPT-J's interleaved form, `transformers`' per-sequence tables, and the declined
shapes) and the corpus' transformers LlamaDecoderLayer at its CPU sizes. The corpus' misc_rope_*
files rotate model inputs (no projection): nothing to fuse, and they must still run unchanged."""
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

from compose_testing import assert_matches as _assert_matches  # noqa: E402
from compose_testing import assert_within_float64_contract, corpus_model  # noqa: E402
from compose_testing import needs_engine_plan  # noqa: E402
from compose_testing import optimize_eagerly as _optimize  # noqa: E402
import rope_models as R  # noqa: E402


LAUNCH = torch.ops.fact.launch.default


# The fused rope is opt-in (patterns/rope/README.md: measured slower on an H100 than the plain
# projection + Inductor's rotary): the tests of the fusion name it; a selection composes only
# what it names, so the whole-model tests name the other patterns too.
OPT_IN = ["rope"]
OPT_IN_ALL = ["rope", "gemm", "attention", "swiglu", "mlp"]
OPT_IN_REASON = "fused rope is opt-in"






def _rope_replacements(report):
    return [c for c in report.composed if c.pattern == "rope"]


CASES = {
    "rotate_half": (lambda: R.RotateHalf(), "gemm_rope_rotate_half", 1),
    "rotate_half_qwen2_bias": (lambda: R.RotateHalf(bias=True), "gemm_rope_rotate_half", 2),
    "rotate_half_untransposed": (lambda: R.RotateHalf(transpose=False), "gemm_rope_rotate_half", 1),
    "interleaved_gptj": (lambda: R.Interleaved(), "gemm_rope_interleaved", 0),
    "per_sequence_tables": (lambda: R.PerSequenceTables(), "gemm_rope_rotate_half", 1),
}


@needs_engine_plan
@pytest.mark.parametrize("name", sorted(CASES))
def test_projection_with_rope_composes_as_one_gemm(name, tmp_path):
    make, rule, derived = CASES[name]
    torch.manual_seed(0)
    module = make().to(torch.bfloat16).eval()
    make_inputs = lambda: [torch.randn(2, 16, 64, dtype=torch.bfloat16)]  # noqa: E731
    composed = _optimize(module, make_inputs(), tmp_path, patterns=OPT_IN)
    report = composed.fact_report
    ropes = _rope_replacements(report)
    assert len(ropes) == 1, str(report)
    assert ropes[0].rule == rule and ropes[0].verified, str(report)
    assert len(ropes[0].calls) == 1 and "gemm_" in ropes[0].calls[0].summary and "rope" in ropes[0].calls[0].summary
    assert len(ropes[0].derived) == derived, str(report)  # rotate-half: the weight (and bias) rows permuted
    if derived:
        assert "permuted" in ropes[0].derived[0], str(report)
    assert not [item for item in report.left_to_pytorch if "rope" in item.what], str(report)
    _assert_matches(composed, module, make_inputs)


@needs_engine_plan
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("patterns", [None, ["gemm"]], ids=["no_selection", "gemm_only"])
def test_by_default_the_rope_is_declined_and_the_projection_is_a_plain_gemm(name, patterns, tmp_path):
    make, rule, _ = CASES[name]
    torch.manual_seed(0)
    module = make().to(torch.bfloat16).eval()
    make_inputs = lambda: [torch.randn(2, 16, 64, dtype=torch.bfloat16)]  # noqa: E731
    composed = _optimize(module, make_inputs(), tmp_path, patterns=patterns)
    report = composed.fact_report
    assert not _rope_replacements(report), str(report)
    declined = [item for item in report.left_to_pytorch if rule in item.what]
    assert len(declined) == 1, str(report)
    assert OPT_IN_REASON in declined[0].reason and "patterns=['rope'" in declined[0].reason, str(report)
    assert "llama-rope.json" in declined[0].reason, str(report)
    # The projection is FACT's plain GEMM (its bias fused for Qwen2), verified; the rotation
    # runs in PyTorch.
    gemms = [c for c in report.composed if c.pattern == "gemm" and "linear" in c.nodes]
    assert len(gemms) == 1 and gemms[0].verified, str(report)
    assert all("rope" not in call.summary for call in gemms[0].calls), str(report)
    assert not gemms[0].derived, str(report)
    _assert_matches(composed, module, make_inputs)


@needs_engine_plan
def test_the_roped_output_is_closer_to_float64_than_pytorchs_bf16(tmp_path):
    """One rounding from the float32 rotation (the kernel's contract), against PyTorch's three
    bf16 roundings (q·cos, rot(q)·sin, their sum)."""
    torch.manual_seed(0)
    module = R.RotateHalf().to(torch.bfloat16).eval()
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    composed = _optimize(module, [x], tmp_path, patterns=OPT_IN)
    assert _rope_replacements(composed.fact_report), str(composed.fact_report)
    with torch.no_grad():
        reference = module.double()(x.double())
        module.to(torch.bfloat16)
        ours = (composed(x).double() - reference).norm() / reference.norm()
        pytorch = (module(x).double() - reference).norm() / reference.norm()
    assert ours <= pytorch, (float(ours), float(pytorch))


DECLINED = {
    "table_per_head": (lambda: R.TablePerHead(), torch.bfloat16, "native", "differs between heads"),
    "partial_rotary": (lambda: R.PartialRotary(), torch.bfloat16, "native", "partial rotary"),
    "float32_strict": (lambda: R.RotateHalf(), torch.float32, "strict", "float32"),
}


@needs_engine_plan
@pytest.mark.parametrize("name", sorted(DECLINED))
def test_what_the_rope_epilogue_cannot_compute_stays_a_gemm_and_is_correct(name, tmp_path):
    make, dtype, precision, reason = DECLINED[name]
    torch.manual_seed(0)
    module = make().to(dtype).eval()
    make_inputs = lambda: [torch.randn(2, 16, 64, dtype=dtype)]  # noqa: E731
    composed = _optimize(module, make_inputs(), tmp_path, precision=precision, patterns=["rope", "gemm"])
    report = composed.fact_report
    assert not _rope_replacements(report), str(report)
    declined = [item for item in report.left_to_pytorch if "rope" in item.what]
    assert declined and reason in declined[0].reason, str(report)
    # The projection itself is still FACT's GEMM.
    assert any(c.pattern == "gemm" for c in report.composed), str(report)
    _assert_matches(composed, module, make_inputs, tol=2e-2 if dtype == torch.bfloat16 else 1e-5)


@needs_engine_plan
@pytest.mark.parametrize("name", ["misc_rope_rotate_half", "misc_rope_interleaved"])
def test_the_corpus_rotations_of_model_inputs_are_not_fused_and_still_run(name, tmp_path):
    module, make_inputs = corpus_model(name)
    composed = _optimize(module, make_inputs(), tmp_path)
    report = composed.fact_report
    assert not _rope_replacements(report), "q and k are model inputs here: no projection to fuse into"
    with torch.no_grad():
        torch.manual_seed(3)
        inputs = make_inputs()
        torch.testing.assert_close(composed(*inputs), module(*inputs), rtol=2e-2, atol=2e-2)


@needs_engine_plan
def test_transformers_llama_decoder_fuses_rope_into_q_and_k_projections(tmp_path):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    module, make_inputs = corpus_model("hf_llama_decoder")
    composed = _optimize(module, make_inputs(), tmp_path, patterns=OPT_IN_ALL)
    report = composed.fact_report
    ropes = _rope_replacements(report)
    assert len(ropes) == 2 and all(r.verified and r.rule == "gemm_rope_rotate_half" for r in ropes), str(report)
    assert not [item for item in report.left_to_pytorch if "rope" in item.what], str(report)
    assert_within_float64_contract(composed, module, make_inputs)


@needs_engine_plan
def test_transformers_llama_decoder_by_default_composes_q_and_k_as_plain_gemms(tmp_path):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    module, make_inputs = corpus_model("hf_llama_decoder")
    composed = _optimize(module, make_inputs(), tmp_path)
    report = composed.fact_report
    assert not _rope_replacements(report), str(report)
    declined = [item for item in report.left_to_pytorch if "gemm_rope_rotate_half" in item.what]
    assert len(declined) == 2 and all(OPT_IN_REASON in d.reason for d in declined), str(report)
    # The q and k projections (the declined reports' first nodes) are composed plain GEMMs.
    projections = {d.what.split(" at ")[1].split("..")[0] for d in declined}
    assert len(projections) == 2, str(report)
    for node in projections:
        gemms = [c for c in report.composed if c.pattern == "gemm" and node in c.nodes]
        assert len(gemms) == 1 and gemms[0].verified, (node, str(report))
        assert all("rope" not in call.summary for call in gemms[0].calls), str(report)
    assert_within_float64_contract(composed, module, make_inputs)
