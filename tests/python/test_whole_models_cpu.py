"""FACT on whole models nobody here wrote (corpus/whole_models.py): transformers'
GPT2LMHeadModel, LlamaForCausalLM (GQA), BertModel with its pooler, ViTForImageClassification,
and torchvision's VisionTransformer (vit_b_16's architecture) and resnet18, each with every
layer, its embeddings and its head, random weights, at small CPU sizes, in float32 and bfloat16.

For each (model, dtype), on the CPU (replacements run the engine's float64 host reference):
  - `fact.optimize(model, example)` under `torch.no_grad()` does not raise, composes at least
    one GEMM, and every composed replacement passed its own check against float64;
  - the composed module on FRESH inputs (new token ids / padding / pixels, the example's
    shapes) runs what was composed (no fallback warning) and each output (logits,
    last_hidden_state, pooler_output) is within the conformance bound of the original run in
    float64 on the same weights: fact.conformance.output_bound, 1e-5 relative in `strict`
    (float32), 2e-2 in bf16 `native`, or 1.5x PyTorch's own error where that is larger
    (tests/python/test_conformance.py says why);
  - at another batch size (3: outside the static plan) the composed module either falls back
    to the original with a warning or runs composed, and is right either way.
The report's composed / left-to-PyTorch summary is printed (`pytest -s` shows it).

test_whole_model_batch_range declares the batch dimension dynamic (batch=1..2x the example's,
strict=True) and checks the composed module at 1, the example's batch, one past it and the
maximum: there every call must run composed, never fall back.

The remainder runs eagerly, as in test_conformance.py: Inductor on a 2-core CPU would compile
each model for a while; test_whole_model_default_remainder runs GPT-2 with every default of
fact.optimize (the Inductor remainder). The `heavy` variants (4 layers, hidden 256-512, 64
tokens, batch 4) and the Inductor run are marked slow; scripts/run_tests.sh (CI) runs them too,
and the whole file takes about 2.5 minutes there on 2 cores. torchvision is optional: its cases
skip with the reason when it is not installed (requirements.txt installs it).
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest
import torch

import fact
from fact.compose import engine_can_plan
from fact.conformance.corpus import (DTYPE_BY_NAME, float64_output, load_file, output_bound,
                                     quiet_torch, relative_error)

REPO_ROOT = Path(__file__).resolve().parents[2]
WHOLE = load_file(REPO_ROOT / "corpus" / "whole_models.py")
MODELS = WHOLE.MODELS

CAN_PLAN, WHY_NOT = engine_can_plan()
needs_engine = pytest.mark.skipif(not CAN_PLAN, reason=f"no FACT engine to plan with: {WHY_NOT}")

EXAMPLE_SEED, FRESH_SEED, OTHER_BATCH_SEED = 1, 2, 3
OTHER_BATCH = 3


def _case(name: str, dtype: str):
    marks = [pytest.mark.slow] if MODELS[name].heavy else []
    return pytest.param(name, dtype, id=f"{name}-{dtype}", marks=marks)


CASES = [_case(name, dtype) for name in MODELS for dtype in ("float32", "bfloat16")]


def _cast(inputs: tuple, dtype: torch.dtype) -> tuple:
    return tuple(x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in inputs)


def _summary(report) -> str:
    composed = ", ".join(f"{c.label} {c.rule} [{', '.join(call.kind for call in c.calls)}]"
                         for c in report.composed) or "nothing"
    left = "\n".join(f"    {item.what}: {item.reason}" for item in report.left_to_pytorch)
    return (f"  precision {report.precision}, runs: {report.runs}\n"
            f"  composed ({len(report.composed)}): {composed}\n"
            f"  left to PyTorch ({len(report.left_to_pytorch)}):" + (f"\n{left}" if left else " none"))


def _check_outputs(spec, model, composed, inputs, precision: str,
                   what: str) -> tuple[list[str], list[str]]:
    """Each named output of the composed module against the original run in float64: (the
    problems, empty when right; the fallback warnings of the composed call). Prints one line
    per output."""
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = spec.outputs(composed(*inputs))
    fallbacks = [str(w.message) for w in caught if "outside the plan" in str(w.message)]
    with quiet_torch(), torch.no_grad():
        want = spec.outputs(model(*inputs))
    reference = spec.outputs(float64_output(model, inputs))
    problems = []
    for key, ref in reference.items():
        if not torch.isfinite(ref).all() or ref.double().std().item() == 0.0:
            problems.append(f"{what} {key}: the float64 reference is constant or not finite "
                            f"(a degenerate model: the comparison would prove nothing)")
            continue
        torch_error = relative_error(want[key], ref)
        fact_error = relative_error(got[key], ref)
        bound = output_bound(precision, torch_error)
        print(f"  {what} {key} {tuple(got[key].shape)}: FACT rel_err {fact_error:.2e}, "
              f"PyTorch's {torch_error:.2e}, bound {bound:.1e}")
        if got[key].shape != want[key].shape or got[key].dtype != want[key].dtype:
            problems.append(f"{what} {key}: composed {tuple(got[key].shape)} {got[key].dtype} != "
                            f"original {tuple(want[key].shape)} {want[key].dtype}")
        elif not fact_error <= bound:
            problems.append(f"{what} {key}: rel_err vs float64 {fact_error:.3g} > bound "
                            f"{bound:.1g} (PyTorch's own: {torch_error:.3g})")
    return problems, fallbacks


def _built(name: str, dtype_name: str):
    """The whole model `name` in `dtype_name` (eval mode) and its example inputs (skipped when
    the package it comes from is missing)."""
    spec = MODELS[name]
    pytest.importorskip(spec.requires, reason=f"{name} needs {spec.requires}")
    dtype = DTYPE_BY_NAME[dtype_name]
    model = spec.build().to(dtype).eval()
    return spec, dtype, model, _cast(spec.inputs(spec.batch, EXAMPLE_SEED), dtype)


@needs_engine
@pytest.mark.parametrize(("name", "dtype_name"), CASES)
def test_whole_model(name, dtype_name, tmp_path):
    spec, dtype, model, example = _built(name, dtype_name)
    started = time.perf_counter()

    with quiet_torch(), torch.no_grad():
        composed = fact.optimize(model, example, work_dir=tmp_path / "work", remainder="eager")
    optimized = time.perf_counter() - started
    report = composed.fact_report
    print(f"\n{name} {dtype_name}: {spec.what}\n{_summary(report)}")

    problems = []
    gemms = [call for c in report.composed for call in c.calls if call.kind.startswith("gemm")]
    if not gemms:
        problems.append("no GEMM composed")
    for entry in report.composed:
        if not entry.verified or entry.rel_err is None or entry.tolerance is None \
                or not entry.rel_err <= entry.tolerance:
            problems.append(f"replacement {entry.label} {entry.rule}: verified {entry.verified}, "
                            f"rel_err {entry.rel_err} (tolerance {entry.tolerance})")
    if report.composed and not str(report.runs).startswith("composed"):
        problems.append(f"replacements were composed but the module runs {report.runs}")

    # Fresh inputs, the example's shapes: the composed path, no fallback.
    fresh = _cast(spec.inputs(spec.batch, FRESH_SEED), dtype)
    found, fallbacks = _check_outputs(spec, model, composed, fresh, report.precision, "fresh inputs")
    problems += found
    if fallbacks:
        problems.append(f"fresh inputs of the example's shapes fell back: {fallbacks[0]}")

    # Another batch size: a fallback with a warning is allowed, a wrong answer is not.
    other = _cast(spec.inputs(OTHER_BATCH, OTHER_BATCH_SEED), dtype)
    found, fallbacks = _check_outputs(spec, model, composed, other, report.precision,
                                      f"batch {OTHER_BATCH}")
    problems += found
    print(f"  batch {OTHER_BATCH}: " + ("fell back to the original with a warning" if fallbacks
                                       else "ran composed")
          + f"; optimize {optimized:.1f} s, test {time.perf_counter() - started:.1f} s")
    assert not problems, f"{name} {dtype_name}:\n" + "\n".join(problems) + "\n" + _summary(report)


@needs_engine
@pytest.mark.parametrize(("dtype_name", "ld"), [("float32", 50260), ("bfloat16", 50264)])
def test_gpt2_lm_head_writes_padded_rows(dtype_name, ld, tmp_path):
    """GPT-2's LM head (vocabulary 50257, unaligned rows) returns its logits as the view of a
    [B, T, ld] allocation (patterns/gemm/README.md, "A result with padded rows"), right."""
    spec, dtype, model, example = _built("gpt2_lm", dtype_name)
    with quiet_torch(), torch.no_grad():
        composed = fact.optimize(model, example, work_dir=tmp_path / "work", remainder="eager")
    plan = json.loads((tmp_path / "work" / "plan.json").read_text())
    heads = [result for r in plan["replacements"] for call in r.get("calls", [])
             for result in call.get("results", []) if result["shape"][-1] == 50257]
    assert len(heads) == 1 and heads[0].get("alloc_shape", [None])[-1] == ld, heads
    fresh = _cast(spec.inputs(spec.batch, FRESH_SEED), dtype)
    with torch.no_grad():
        logits = spec.outputs(composed(*fresh))["logits"]
    batch, seq = logits.shape[:2]
    assert logits.stride() == (seq * ld, ld, 1)
    assert logits.untyped_storage().nbytes() == batch * seq * ld * logits.element_size()
    problems, fallbacks = _check_outputs(spec, model, composed, fresh, composed.fact_report.precision,
                                         "fresh inputs")
    assert not problems and not fallbacks, problems + fallbacks


def test_models_are_not_conformance_files():
    """The builder module is not picked up by the corpus runs (no `<category>_` prefix)."""
    from fact.conformance.corpus import corpus_files
    assert REPO_ROOT / "corpus" / "whole_models.py" not in corpus_files(REPO_ROOT / "corpus")
    assert len(MODELS) >= 6


# The heavy variants are left out here: declared ranges verify each replacement at several sizes
# (20-35 s per heavy model on 2 cores), and CI runs the slow tests too.
RANGE_CASES = [pytest.param(name, dtype, id=f"{name}-{dtype}")
               for name in MODELS if not MODELS[name].heavy for dtype in ("float32", "bfloat16")]


@needs_engine
@pytest.mark.parametrize(("name", "dtype_name"), RANGE_CASES)
def test_whole_model_batch_range(name, dtype_name, tmp_path):
    """The batch dimension declared dynamic (batch=1..2x the example's, strict=True: a call in
    the range must run composed, never fall back): fresh inputs at 1, the example's batch, one
    past it and the maximum, each within the bound of the original run in float64."""
    from fact.dynamic_ranges import Range

    spec, dtype, model, example = _built(name, dtype_name)
    started = time.perf_counter()
    declared = Range("batch", 1, 2 * spec.batch)
    with quiet_torch(), torch.no_grad():
        composed = fact.optimize(model, example, work_dir=tmp_path / "work", remainder="eager",
                                 dynamic_shapes=tuple({0: declared} for _ in example), strict=True)
    report = composed.fact_report
    print(f"\n{name} {dtype_name}, {declared.spec()}:\n{_summary(report)}")
    problems = []
    if not any(call.kind.startswith("gemm") for c in report.composed for call in c.calls):
        problems.append("no GEMM composed over the declared range")
    # A call's sizes must fit one polynomial over the range, B = 1 included (a head on the
    # first token, x[:, 0], keeps its row stride at B = 1)
    problems += [f"{x.what}: {x.reason}" for x in report.left_to_pytorch if "not a polynomial" in x.reason]
    for index, size in enumerate(sorted({1, spec.batch, spec.batch + 1, 2 * spec.batch})):
        inputs = _cast(spec.inputs(size, 10 + index), dtype)
        try:
            found, fallbacks = _check_outputs(spec, model, composed, inputs, report.precision,
                                              f"batch {size}")
        except ValueError as error:   # strict: a fallback inside the range raises
            found, fallbacks = [f"batch {size}: {error}"], []
        problems += found + [f"batch {size} fell back: {w}" for w in fallbacks]
    print(f"  {time.perf_counter() - started:.1f} s")
    assert not problems, f"{name} {dtype_name}:\n" + "\n".join(problems) + "\n" + _summary(report)


@needs_engine
@pytest.mark.slow
def test_whole_model_default_remainder(tmp_path):
    """`fact.optimize(model, example)` with every default (the Inductor remainder) on GPT-2:
    composed and right on fresh inputs (Inductor compiles the rest for a minute on 2 cores)."""
    spec = MODELS["gpt2_lm"]
    model = spec.build().eval()
    with quiet_torch(), torch.no_grad():
        composed = fact.optimize(model, spec.inputs(spec.batch, EXAMPLE_SEED),
                                 work_dir=tmp_path / "work")
    report = composed.fact_report
    print(f"\ngpt2_lm float32, default remainder ({report.remainder}):\n{_summary(report)}")
    problems, fallbacks = _check_outputs(spec, model, composed, spec.inputs(spec.batch, FRESH_SEED),
                                         report.precision, "fresh inputs")
    assert report.composed and not fallbacks and not problems, "\n".join(problems + fallbacks)
