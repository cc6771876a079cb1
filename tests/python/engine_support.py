"""Finding the FACT engine for the Python tests: fact._engine's own search ($FACT_ENGINE, next to
the interpreter, build/fact), else the newest build*/fact of this checkout (exported as
$FACT_ENGINE so the code under test finds the same one). `needs_engine` skips a test, with the
reason shown, when none is built."""
import os
from pathlib import Path

import pytest

from fact._engine import EngineNotFound, engine_path

REPO_ROOT = Path(__file__).resolve().parents[2]


def find_engine() -> bool:
    try:
        engine_path()
        return True
    except EngineNotFound:
        builds = sorted(REPO_ROOT.glob("build*/fact"), key=lambda p: p.stat().st_mtime)
        if builds:
            os.environ["FACT_ENGINE"] = str(builds[-1])
            return True
    return False


needs_engine = pytest.mark.skipif(not find_engine(), reason="the fact engine is not built")
