"""conftest.py's `--shard I/N` (scripts/pytest_gpu.sh runs `pytest -m gpu` as N shards side by
side): the shards of a selection are disjoint and together are the whole selection, after -m."""
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

TESTS = """
import pytest

@pytest.mark.gpu
def test_a(): pass

@pytest.mark.gpu
def test_b(): pass

def test_not_gpu(): pass

@pytest.mark.gpu
@pytest.mark.parametrize("n", range(4))
def test_c(n): pass
"""


def _selected(folder: Path, *args: str) -> tuple[int, list[str]]:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:cacheprovider", *args], cwd=folder, capture_output=True, text=True)
    return run.returncode, [line for line in run.stdout.splitlines() if "::" in line]


def _project(tmp_path: Path) -> Path:
    shutil.copy(REPO_ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU test\n")
    (tmp_path / "test_sample.py").write_text(TESTS)
    return tmp_path


def test_shards_split_the_selection_into_disjoint_slices_that_cover_it(tmp_path):
    folder = _project(tmp_path)
    code, everything = _selected(folder, "-m", "gpu")
    assert code == 0 and len(everything) == 6, everything
    slices = []
    for index in range(4):
        code, selected = _selected(folder, "-m", "gpu", "--shard", f"{index}/4")
        assert code in (0, 5), (index, selected)
        slices.append(selected)
    assert sorted(sum(slices, [])) == sorted(everything)
    assert all(len(s) in (1, 2) for s in slices), slices  # round robin: sizes differ by at most one


def test_a_malformed_shard_is_a_usage_error(tmp_path):
    folder = _project(tmp_path)
    for bad in ("1", "4/4", "a/b", "0/0"):
        code, _ = _selected(folder, "--shard", bad)
        assert code == 4, bad  # pytest's usage error
