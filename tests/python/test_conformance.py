"""FACT on the conformance corpus (corpus/), on the CPU: every model file at its
CPU_TEST_SIZES, in each of its DTYPES (float32 in precision `strict`, bfloat16 in `native`).

For each (model, dtype), `fact.optimize(model, inputs, precision, work_dir=tmp,
remainder="eager")` runs on the CPU, where every composed replacement executes the engine's
float64 host reference (fact_reference_call), and:
  - nothing raises out of fact.optimize or out of the composed module's forward;
  - the composed output is compared, like PyTorch's own output, with the original module run in
    float64 on the same weights and inputs: ‖fact − ref64‖ / ‖ref64‖ must be within
    fact.conformance.OUTPUT_BOUND: 1e-5 in `strict` (the contract: as accurate as PyTorch's
    float32 path, whose error stays under 3.4e-7 on every corpus model at these sizes, so 1e-5
    leaves ~30x and still catches any TF32/bf16-sized error, 1e-4..1e-3), 2e-2 in bf16 `native`
    (one bf16 rounding is 2^-9 ~ 2e-3; PyTorch's own bf16 error on the corpus stays under
    4.5e-3; a wrong operand, epilogue step or layout is off by O(1)), or 1.5x PyTorch's error
    where that is larger (never at the committed sizes);
  - every composed replacement was verified against the subgraph it replaces (fact.verify, float64,
    fresh inputs) and is within its call's tolerance: in residual blocks the residual stream
    dilutes an error in one GEMM, the per-replacement check does not;
  - whatever is not composed is in `.fact_report.left_to_pytorch` with a reason;
  - the GEMM FLOPs counted on the captured graph equal those counted at the dispatcher.
The remainder runs eagerly here (Inductor on a 2-core CPU would compile every model for
minutes); test_inductor_remainder composes two models with the Inductor remainder.

test_coverage_table (after the per-model tests) prints the coverage table, writes it as JSON to
$FACT_CONFORMANCE_OUT (default out/conformance/coverage.json) and prints its difference against
the committed corpus/coverage-cpu.json: coverage gained or lost is printed, never a failure; a
model that was ok there and now crashes or is wrong fails. After a change that moves coverage,
rewrite the committed table and commit it with the change, so the review shows the move:

    PYTHONPATH=python python -m fact.conformance --cpu --write-baseline

The slow-marked tests run the `fact optimize model.py:Model` CLI (capture on the package's device,
plan, package; --no-compile) on a few representative files, shrunk to their CPU_TEST_SIZES.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fact import _engine
from fact import conformance as conf
from fact.compose import engine_can_plan

REPO_ROOT = Path(__file__).resolve().parents[2]
FILES = conf.corpus_files(REPO_ROOT / "corpus")
CASES = [(path, dtype) for path in FILES for dtype in conf.file_dtypes(path)]
IDS = [f"{path.stem}-{dtype}" for path, dtype in CASES]
ROWS: dict[str, dict] = {}      # row_key -> row, filled by test_corpus_model

CAN_PLAN, WHY_NOT = engine_can_plan()
needs_engine = pytest.mark.skipif(not CAN_PLAN, reason=f"no FACT engine to plan with: {WHY_NOT}")


@pytest.fixture(scope="module")
def work_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("conformance")


def _run(path: Path, dtype: str, work_root: Path) -> dict:
    row = conf.run_cpu_case(path, dtype, work_root / f"{path.stem}-{dtype}")
    ROWS[conf.row_key(row)] = row
    return row


@needs_engine
@pytest.mark.parametrize(("path", "dtype"), CASES, ids=IDS)
def test_corpus_model(path, dtype, work_root):
    row = _run(path, dtype, work_root)
    assert row["status"] == "ok", f"{row['status']}:\n" + "\n".join(row["problems"])
    coverage = row["coverage"]
    assert coverage["composed"] + coverage["declined"] >= coverage["matches"]
    for item in coverage["declined_items"]:
        assert item["reason"].strip(), f"declined without a reason: {item}"
    if coverage["flops_source"] == "graph":
        assert coverage["gemm_flops"] == pytest.approx(coverage["counted_gemm_flops"], rel=1e-9, abs=1.0), \
            "the GEMM FLOPs counted on the captured graph differ from the dispatcher's count"


def _output_path() -> Path:
    given = os.environ.get("FACT_CONFORMANCE_OUT")
    return Path(given) if given else REPO_ROOT / "out" / "conformance" / "coverage.json"


@needs_engine
def test_coverage_table(work_root, capsys):
    for path, dtype in CASES:  # rows the per-model tests did not produce (-k, a single test)
        if f"{path.stem}:{dtype}" not in ROWS:
            _run(path, dtype, work_root)
    table = conf.make_table(ROWS.values())
    out = _output_path()
    conf.write_json(out, table)
    baseline_path = conf.BASELINE_FILE
    diff = conf.compare(table, json.loads(baseline_path.read_text())) if baseline_path.is_file() else None
    text = conf.format_table(table)
    text += "\n\n" + (conf.format_diff(diff) if diff is not None
                      else f"no committed table at {baseline_path} to compare with")
    out.with_suffix(".txt").write_text(text + "\n")
    with capsys.disabled():
        print("\n\n== conformance coverage (CPU, CPU_TEST_SIZES) ==\n" + text + f"\n\nwrote {out}\n")
    if diff is not None:
        assert not diff["broken"], "models that were ok in corpus/coverage-cpu.json now fail:\n" + \
            "\n".join(diff["broken"])
    totals = table["totals"]
    assert totals["crash"] == 0 and totals["wrong"] == 0


def test_reason_groups_take_out_numbers_and_shapes():
    assert conf.reason_group("declined: K=770 not a multiple of 8 for bf16 (TMA needs 16-byte "
                             "aligned rows)") == \
        "declined: K=N not a multiple of N for bf16 [..]"
    a = conf.reason_group("declined: layout: operand A [2, 4, 16, 16] with strides [1024, 16, 64, 1]: "
                          "batch dims [2, 4] do not collapse into one batch stride")
    b = conf.reason_group("declined: layout: operand A [8, 2, 32, 16] with strides [4096, 32, 128, 1]: "
                          "batch dims [8, 2] do not collapse into one batch stride")
    assert a == b and "float32" in conf.reason_group("float32 GEMMs need strict")
    assert conf.reason_group("failed: call 1a: x") == conf.reason_group("failed: call 2: x")
    assert conf.reason_group("K=770 for fp32") == conf.reason_group("K=64 for fp32") == "K=N for fp32"


def test_graph_flops_of_each_gemm_spelling():
    """graph_gemm_flops against hand counts: linear, addmm (operand 1), 3-D @ 1-D matmul,
    a contracting einsum, an outer-product einsum (no GEMM), SDPA (both products)."""
    def value(vid, shape):
        return {"id": vid, "shape": shape}

    doc = {"values": [value("x", [2, 3, 8]), value("w", [5, 8]), value("y", [2, 3, 5]),
                      value("b", [5]), value("m", [6, 8]), value("t", [8, 5]), value("z", [6, 5]),
                      value("v", [8]), value("u", [2, 3]), value("e", [2, 3, 4]), value("f", [4, 7]),
                      value("g", [2, 3, 7]), value("p", [3]), value("q", [4]), value("o", [3, 4]),
                      value("Q", [2, 4, 16, 32]), value("K", [2, 4, 10, 32]), value("V", [2, 4, 10, 48]),
                      value("A", [2, 4, 16, 48])],
           "nodes": [
               {"id": "lin", "target": "aten.linear.default", "args": [{"tensor": "x"}, {"tensor": "w"}], "outputs": ["y"]},
               {"id": "addmm", "target": "aten.addmm.default", "args": [{"tensor": "b"}, {"tensor": "m"}, {"tensor": "t"}], "outputs": ["z"]},
               {"id": "mv", "target": "aten.matmul.default", "args": [{"tensor": "x"}, {"tensor": "v"}], "outputs": ["u"]},
               {"id": "ein", "target": "aten.einsum.default", "args": [{"const": "btd,dk->btk"}, {"tensors": ["e", "f"]}], "outputs": ["g"]},
               {"id": "outer", "target": "aten.einsum.default", "args": [{"const": "i,j->ij"}, {"tensors": ["p", "q"]}], "outputs": ["o"]},
               {"id": "sdpa", "target": "aten.scaled_dot_product_attention.default", "args": [{"tensor": "Q"}, {"tensor": "K"}, {"tensor": "V"}], "outputs": ["A"]},
               {"id": "relu", "target": "aten.relu.default", "args": [{"tensor": "y"}], "outputs": ["r"]}]}
    flops = conf.graph_gemm_flops(doc)
    assert flops == {"lin": 2 * 6 * 5 * 8, "addmm": 2 * 6 * 5 * 8, "mv": 2 * 6 * 8,
                     "ein": 2 * 2 * 3 * 4 * 7, "outer": 0.0,
                     "sdpa": 2 * 8 * 16 * 10 * (32 + 48)}


def test_compare_reports_broken_lost_and_gained():
    def row(model, status, composed, share, rules):
        return {"model": model, "dtype": "float32", "status": status, "problems": ["boom"],
                "coverage": {"composed": composed, "share": share, "composed_rules": rules}}

    baseline = {"rows": [{"model": "a", "dtype": "float32", "status": "ok", "composed": 2,
                          "share": 1.0, "composed_rules": ["gemm", "gemm_bias"]},
                         {"model": "b", "dtype": "float32", "status": "ok", "composed": 0,
                          "share": 0.0, "composed_rules": []},
                         {"model": "c", "dtype": "float32", "status": "ok", "composed": 1,
                          "share": 0.5, "composed_rules": ["gemm"]}]}
    table = {"rows": [row("a", "ok", 1, 0.5, ["gemm"]), row("b", "ok", 1, 0.7, ["gemm"]),
                      row("c", "crash", 0, 0.0, []), row("d", "ok", 0, None, [])]}
    diff = conf.compare(table, baseline)
    assert [line.split(":")[0] for line in diff["broken"]] == ["c"]
    assert [line.split(":")[0] for line in diff["lost"]] == ["a", "c"]
    assert "gemm_bias" in diff["lost"][0]
    assert [line.split(":")[0] for line in diff["gained"]] == ["b"]
    assert [line.split(":")[0] for line in diff["new"]] == ["d"]


@needs_engine
@pytest.mark.slow
@pytest.mark.parametrize(("stem", "dtype"), [("epilogue_residual_sides", "float32"),
                                             ("mlp_transformer_ffn", "bfloat16")])
def test_inductor_remainder(stem, dtype, tmp_path):
    """fact.optimize's default remainder (Inductor) on the CPU: composed, and as right as with
    the eager remainder."""
    row = conf.run_cpu_case(REPO_ROOT / "corpus" / f"{stem}.py", dtype, tmp_path, remainder="inductor")
    assert row["status"] == "ok", "\n".join(row["problems"])
    assert row["coverage"]["composed"] > 0 and row["runs"].startswith("composed")
    if not row["remainder"].startswith("inductor"):
        pytest.skip(f"Inductor does not compile here: {row['remainder']}")


# --------------------------------------------------------------------------------------------
# The `fact optimize model.py:Model` CLI


def _shrunk_copy(stem: str, folder: Path) -> Path:
    """The corpus file with its CPU_TEST_SIZES assigned at import (the CLI builds the module at
    the file's own sizes)."""
    source = (REPO_ROOT / "corpus" / f"{stem}.py").read_text()
    path = folder / f"{stem}.py"
    path.write_text(source + "\n\nglobals().update(CPU_TEST_SIZES)  # fact conformance: CPU sizes\n")
    return path


CLI_CASES = [
    ("gemm_linear_bias", "float32", True),      # one nn.Linear: composed
    ("mlp_swiglu_llama", "bfloat16", True),     # a whole MLP chain in bf16
    ("hf_llama_decoder", "bfloat16", True),     # transformers mask helpers traced on meta
    ("hf_bert_layer", "float32", True),         # a padding mask read by the mask helper
    ("misc_data_dependent_branch", "float32", False),  # not exportable: a decline, no crash
]


@needs_engine
@pytest.mark.slow
@pytest.mark.parametrize(("stem", "dtype", "composes"), CLI_CASES,
                         ids=[f"{s}-{d}" for s, d, _ in CLI_CASES])
def test_fact_optimize_cli(stem, dtype, composes, tmp_path):
    try:
        engine = _engine.engine_path()
    except _engine.EngineNotFound as error:
        pytest.skip(str(error))
    model = _shrunk_copy(stem, tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, FACT_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([str(engine), "optimize", f"{model}:Model", "--dtype", dtype,
                           "--no-compile", "-o", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, log
    assert "Traceback" not in done.stdout + done.stderr, log
    assert (out / "report.json").is_file() and (out / "report.md").is_file()
    packaged = json.loads((out / "fact_model" / "report.json").read_text())
    # The plan names the graph the package exports: captured on the device it runs on (on meta,
    # SDPA's output strides differ and a `.contiguous()` node shifted every later name).
    mismatched = [i for i in packaged["left_to_pytorch"]
                  if "not in the exported graph" in i["reason"] or "differ from the plan" in i["reason"]]
    assert not mismatched, mismatched
    if composes:
        assert packaged["composed"], f"the package composed nothing: {packaged['left_to_pytorch']}"
        assert all(c["verified"] for c in packaged["composed"])
    else:
        assert not packaged["composed"] and packaged["left_to_pytorch"]
        assert all(item["reason"] for item in packaged["left_to_pytorch"])


# --------------------------------------------------------------------------------------------
# The GPU benchmark's runner, on the CPU (what `fact bench conformance` starts)

RAISES = '''"""A model whose forward raises: the runner records it and goes on."""
import torch
N = 64
CPU_TEST_SIZES = {"N": 16}
DTYPES = ("float32",)
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = torch.nn.Linear(n, n)
    def forward(self, x):
        raise RuntimeError("this model is broken on purpose")
def get_inputs(dtype=torch.float32, device="cpu"):
    return [torch.randn(N, N, dtype=dtype, device=device)]
def get_init_inputs():
    return [N]
'''
DIES = RAISES.replace("raise RuntimeError(\"this model is broken on purpose\")",
                      "import os; os._exit(7)").replace("forward raises", "forward ends the process")


@needs_engine
@pytest.mark.slow
def test_gpu_runner_smoke_on_cpu(tmp_path):
    """`python -m fact.conformance --gpu --device cpu --sizes cpu` on a corpus of three files:
    one that works, one whose forward raises (recorded as failed), one whose forward ends the
    process (its worker dies: recorded as failed, a fresh worker runs the rest). The results
    file has the shape of every results file, the table and the plot are written."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "gemm_linear_bias.py").write_text((REPO_ROOT / "corpus" / "gemm_linear_bias.py").read_text())
    (corpus / "gemm_a_raises.py").write_text(RAISES)
    (corpus / "gemm_b_dies.py").write_text(DIES)
    out = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "python"),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "fact.conformance", "--gpu", "--device", "cpu",
                           "--sizes", "cpu", "--corpus", str(corpus), "--dtypes", "float32",
                           "--iters", "2", "--warmup", "1", "-o", str(out),
                           "--work-dir", str(tmp_path / "work"), "--variant", "smoke"],
                          capture_output=True, text=True, env=env, timeout=600)
    log = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, log
    [results] = list(out.glob("conformance-cpu-*-smoke.json"))
    doc = json.loads(results.read_text())
    assert doc["suite"] == "conformance" and doc["device"] == "cpu" and doc["date"]
    assert set(doc["versions"]) >= {"driver", "cuda", "torch", "cutlass", "fact"}
    cases = {c["model"]: c for c in doc["cases"]}
    assert set(cases) == {"gemm_linear_bias", "gemm_a_raises", "gemm_b_dies"}
    good = cases["gemm_linear_bias"]
    assert good["status"] == "ok" and good["precision"] == "strict", good
    assert good["fact_ms"] > 0 and good["rel_err"] <= 1e-5
    for name in ("torch_eager", "torch_compile"):
        assert good["baselines"][name]["ms"] > 0 and good["baselines"][name]["rel_err"] <= 1e-5
        assert good["speedup"][name] > 0
    assert good["coverage"]["composed"] == 1 and good["coverage"]["share"] == pytest.approx(1.0)
    assert cases["gemm_a_raises"]["status"] == "failed"
    assert "broken on purpose" in cases["gemm_a_raises"]["reason"]
    assert cases["gemm_b_dies"]["status"] == "failed" and "worker" in cases["gemm_b_dies"]["reason"]
    assert doc["summary"]["by_status"] == {"ok": 1, "failed": 2}
    assert results.with_suffix(".md").is_file()
    assert "gemm_linear_bias" in results.with_suffix(".md").read_text()
    pytest.importorskip("matplotlib")
    assert results.with_suffix(".png").is_file()
