"""The conformance run's declared-range check (fact.conformance.dynamic) on its own: which
cases have a batch dimension, the sizes called, inputs resized without breaking token ids,
and one whole check on a corpus model that must pass and serve every size composed."""
from __future__ import annotations

import pytest
import torch

from fact import conformance as conf
from fact.conformance import dynamic


def test_batch_dimension_needs_a_shared_first_dimension_of_at_least_two():
    assert dynamic.batch_dimension([torch.zeros(4, 3), torch.zeros(4, 5, 6)]) == (4, "")
    assert dynamic.batch_dimension([torch.zeros(4, 3), torch.zeros(3, 4)])[0] is None
    assert dynamic.batch_dimension([torch.zeros(1, 3)])[0] is None
    assert dynamic.batch_dimension([torch.zeros(4, 3), 2.0])[0] is None
    assert dynamic.batch_dimension([torch.zeros(())])[0] is None


def test_sizes_and_resized_inputs():
    assert dynamic.batch_sizes(4) == [1, 4, 5, 8]
    assert dynamic.batch_sizes(2) == [1, 2, 3, 4]
    ids = torch.tensor([[3, 1], [2, 7]])
    x = torch.randn(2, 5, dtype=torch.bfloat16)
    got_ids, got_x = dynamic.resized([ids, x], 5, seed=0)
    assert got_ids.shape == (5, 2) and set(got_ids.flatten().tolist()) <= {1, 2, 3, 7}
    assert got_x.shape == (5, 5) and got_x.dtype == torch.bfloat16


@pytest.mark.parametrize("stem", ["gemm_linear_bias"])
def test_a_corpus_model_serves_its_batch_range(stem, tmp_path):
    path = conf.CORPUS_DIR / f"{stem}.py"
    row = conf.run_cpu_case(path, "float32", tmp_path)
    entry = row.get("dynamic")
    assert entry is not None, row
    assert entry["status"] == "ok", row["problems"]
    assert entry["composed"] >= 1, entry
    assert [c["batch"] for c in entry["checks"]] == entry["sizes"]
    assert all(c["fact_rel_err"] <= c["bound"] for c in entry["checks"]), entry
