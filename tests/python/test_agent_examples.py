"""Example retrieval for an agent task ranks on what the task computes (its ops, kind and
dtype): for a causal attention, attention examples come first, and neither a registry kernel
of another problem (an int4 grouped GEMM) nor a CUTLASS int4 GEMM is ranked above them."""
from __future__ import annotations

from fact.agent import examples


def attention_task(dtype: str = "float32", arch: str = "sm_90a") -> dict:
    fragment = {"nodes": [{"id": "n0", "target": "aten.scaled_dot_product_attention.default"}]}
    return {"match": {"rule": "attention_causal", "pattern": "attention", "dtype": dtype},
            "semantics": {"fragment": fragment}, "arch": arch}


def int4_grouped_gemm_entry(dtype: str = "float32") -> dict:
    return {"id": f"gemm_grouped_int4/{dtype}/sm_90a/0123456789ab", "rule": "gemm_grouped_int4",
            "pattern": "gemm_grouped", "dtype": dtype, "arch": "sm_90a", "origin": "agent",
            "source": {"text": "// int4 grouped GEMM\n"},
            "reference": {"fragment": {"nodes": [{"id": "n0", "target": "aten.mm.default"}]}}}


def attention_entry() -> dict:
    return {"id": "attention_causal/float32/host/fedcba987654", "rule": "attention_causal", "pattern": "attention",
            "dtype": "float32", "arch": "host", "origin": "agent", "source": {"text": "// causal attention\n"},
            "reference": {"fragment": attention_task()["semantics"]["fragment"]}}


def test_a_registry_kernel_of_another_problem_is_no_example():
    for dtype in ("float32", "bfloat16"):
        found = examples.registry_examples(attention_task(dtype), [int4_grouped_gemm_entry(dtype)])
        assert found == [], [e.id for e in found]
    ranked = examples.registry_examples(attention_task(), [int4_grouped_gemm_entry(), attention_entry()])
    assert [e.id for e in ranked] == [attention_entry()["id"]]


def test_causal_attention_ranks_attention_examples_first():
    if examples.cutlass_examples_dir() is None:
        import pytest
        pytest.skip("the nvidia-cutlass wheel (its examples) is not installed")
    for dtype in ("float32", "bfloat16"):
        for arch in ("sm_90a", "host"):
            task = attention_task(dtype, arch)
            found = examples.retrieve(task, [int4_grouped_gemm_entry(dtype)], k=5)
            ids = [e.id for e in found]
            assert not any("int4" in i or "grouped" in i for i in ids[:3]), (dtype, arch, ids)
            assert any(word in ids[0] for word in ("fmha", "attention")), (dtype, arch, ids)
