"""The conformance corpus (corpus/*.py) follows its convention and every file runs and exports
at its CPU_TEST_SIZES, without FACT: the models themselves are correct before FACT is judged on
them. The checks are corpus/check_corpus.py's, one test per file."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS = REPO_ROOT / "corpus"


def _load_checker():
    spec = importlib.util.spec_from_file_location("fact_corpus_check", CORPUS / "check_corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


check = _load_checker()
FILES = check.corpus_files(CORPUS)
IDS = [p.stem for p in FILES]
MIN_PER_CATEGORY = {"gemm": 12, "epilogue": 10, "mlp": 7, "attention": 9, "hf": 7, "misc": 4}
CPU_PARAMETER_LIMIT = 2_000_000     # parameters of a model at CPU_TEST_SIZES
CPU_INPUT_LIMIT = 200_000           # elements of all its inputs


def test_corpus_is_complete():
    assert len(FILES) >= 44
    for category, minimum in MIN_PER_CATEGORY.items():
        count = sum(p.stem.startswith(category + "_") for p in FILES)
        assert count >= minimum, f"{category}: {count} files, want >= {minimum}"


def test_readme_lists_every_file():
    readme = (CORPUS / "README.md").read_text()
    listed = set(re.findall(r"^\|\s*`?([a-z0-9_]+)(?:\.py)?`?\s*\|", readme, flags=re.M))
    missing = sorted(set(IDS) - listed)
    stale = sorted(n for n in listed - set(IDS) if n.split("_", 1)[0] in check.CATEGORIES)
    assert not missing, f"files missing from corpus/README.md's table: {missing}"
    assert not stale, f"corpus/README.md lists files that do not exist: {stale}"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_convention(path):
    module = check.load(path)
    assert check.convention_problems(module) == []
    full = check.size_constants(module)
    assert any(full[k] != v for k, v in module.CPU_TEST_SIZES.items()), \
        "CPU_TEST_SIZES equal the full sizes: nothing is shrunk"


def _parameters(module, device):
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_sizes_are_read_at_call_time(path):
    """Shrinking the module constants shrinks the model and its inputs: nothing captured the
    full sizes at import time (a default argument, a derived module-level constant)."""
    module = check.load(path)
    full_parameters = _parameters(module, "meta")
    check.apply_sizes(module, module.CPU_TEST_SIZES)
    small_parameters = _parameters(module, "meta")
    assert small_parameters <= CPU_PARAMETER_LIMIT
    assert small_parameters < full_parameters or full_parameters == 0
    inputs = check._call_get_inputs(module, torch.float32, "cpu")
    assert sum(x.numel() for x in inputs if isinstance(x, torch.Tensor)) <= CPU_INPUT_LIMIT


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_runs_and_exports(path):
    """Eager in each of the file's DTYPES (finite, not constant, close to float64), then
    torch.export(strict=False) and the exported module matches eager (or export fails where
    the file says EXPORTABLE = False)."""
    rows = check.check_file(path)
    assert rows, "no dtype to run"
    for row in rows:
        assert row.ok, f"{row.dtype}:\n" + "\n".join(row.errors)
        bound = 1e-5 if row.dtype == "float32" else 5e-2
        assert row.rel_err_f64 is not None and row.rel_err_f64 <= bound, \
            f"{row.dtype}: eager vs float64 rel err {row.rel_err_f64:.1e} > {bound:.0e} (ill-conditioned test size?)"
