"""`fact optimize --dynamic SPEC [--dims INPUT:DIM,...]`: listed by --help, forwarded to the
driver (python -m fact.optimize_run), and a bad declaration is one clear error line before
anything is planned."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import fact._engine

REPO = Path(__file__).resolve().parents[2]
TINY_MLP = f"{REPO / 'bench' / 'models' / 'tiny_mlp.py'}:TinyMLP"
try:
    ENGINE = fact._engine.engine_path()
    WHY = ""
except fact._engine.EngineNotFound as error:  # pragma: no cover - the test command builds it
    ENGINE, WHY = None, str(error)
pytestmark = pytest.mark.skipif(ENGINE is None, reason=f"no `fact` engine built: {WHY}")


def _optimize(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENGINE), "optimize", TINY_MLP, "-o", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=600)


def test_help_lists_the_dynamic_flags():
    text = subprocess.run([str(ENGINE), "optimize", "--help"], capture_output=True, text=True,
                          timeout=60).stdout
    assert "--dynamic" in text and "NAME=MIN..MAX[:MULTIPLE][@T1/T2]" in text
    assert "--dims" in text and "x:batch,seq,_" in text


@pytest.mark.parametrize("args,message", [
    (["--dynamic", "batch"], "--dynamic: 'batch' is not NAME=MIN..MAX"),
    (["--dynamic", "batch=9..1"], "batch: the range 9..1 is empty"),
    (["--dynamic", "batch=1..8", "--dims", "x"], "--dims 'x' is not INPUT:DIM"),
])
def test_a_bad_declaration_is_one_error_line(tmp_path, args, message):
    run = _optimize(tmp_path, *args)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"fact: error: {message}" in run.stderr, run.stderr


@pytest.mark.parametrize("args,message", [
    (["--dynamic", "batch=1..8", "--dims", "y:batch,_,_"], "--dims y: 'y' is not a forward parameter (x)"),
    (["--dynamic", "batch=8..16"], "batch: the example size 4 (input 0 dim 0) is not in 8..16"),
    (["--dynamic", "batch=1..8", "--dims", "x:batch,seq,_"], "'seq' is not a declared range"),
])
def test_declarations_are_checked_against_the_model(tmp_path, args, message):
    run = _optimize(tmp_path, *args)
    assert run.returncode == 1, run.stdout + run.stderr
    assert message in run.stderr, run.stderr
