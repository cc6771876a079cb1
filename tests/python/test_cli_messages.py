"""What `fact` says to a user who mistypes a command or asks for help: a misspelt command is
named, with the nearest real one and the list of commands; `--help` shows each option's
default."""
from __future__ import annotations

import subprocess

import pytest

import fact._engine

try:
    ENGINE = fact._engine.engine_path()
    WHY = ""
except fact._engine.EngineNotFound as error:  # pragma: no cover - the test command builds it
    ENGINE = None
    WHY = str(error)
pytestmark = pytest.mark.skipif(ENGINE is None, reason=f"no `fact` engine built: {WHY}")


def _fact(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENGINE), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("typed, meant", [("optimise", "optimize"), ("discver", "discover"),
                                          ("tun", "tune"), ("realise", "realize")])
def test_a_misspelt_command_is_named_with_the_nearest_one(typed, meant):
    run = _fact(typed, "model.py:Block")
    assert run.returncode == 2
    assert f"unknown command '{typed}'" in run.stderr
    assert f"did you mean '{meant}'?" in run.stderr
    assert "commands:" in run.stderr and "optimize" in run.stderr


def test_a_word_far_from_every_command_gets_the_list_without_a_guess():
    run = _fact("xylophone")
    assert run.returncode == 2
    assert "unknown command 'xylophone'" in run.stderr and "did you mean" not in run.stderr
    assert "commands:" in run.stderr


def test_real_commands_and_options_still_parse():
    assert _fact("--version").returncode == 0
    assert _fact("optimize", "--help").returncode == 0


def test_help_shows_the_defaults():
    text = _fact("optimize", "--help").stdout
    assert "out/optimize" in text, text
