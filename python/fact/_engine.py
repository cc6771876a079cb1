"""Locating and calling the C++ engine (the `fact` executable).

Search order: $FACT_ENGINE, the `fact` executable installed next to this interpreter
(a pip install puts it in the environment's bin/), then <repo>/build/fact.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


class EngineNotFound(RuntimeError):
    pass


def engine_path() -> Path:
    """Path of the `fact` executable; raises EngineNotFound with what was tried."""
    tried = []
    env = os.environ.get("FACT_ENGINE")
    if env:
        if Path(env).is_file():
            return Path(env)
        tried.append(f"$FACT_ENGINE={env}")
    beside_python = Path(sys.executable).parent / "fact"
    if beside_python.is_file():
        return beside_python
    tried.append(str(beside_python))
    repo_build = Path(__file__).resolve().parents[2] / "build" / "fact"
    if repo_build.is_file():
        return repo_build
    tried.append(str(repo_build))
    on_path = shutil.which("fact")
    if on_path:
        return Path(on_path)
    raise EngineNotFound("FACT engine not found (tried: " + ", ".join(tried) +
                         "); build it with `bash scripts/setup.sh` or `pip install .`")


def run_engine(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    """Runs `fact <args>`; raises RuntimeError with the engine's stderr when it fails."""
    proc = subprocess.run([str(engine_path()), *args], text=True,
                          capture_output=capture)
    if check and proc.returncode != 0:
        raise RuntimeError(f"fact {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
