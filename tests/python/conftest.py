"""Makes the in-tree `fact` package importable when it is not installed, and provides the fake
kind's reference library (tests/python/fake_kind.py) to the tests that compose on the CPU."""
import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("fact") is None:
    sys.path.insert(0, str(REPO_ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def fake_kind_library(tmp_path_factory) -> Path:
    """tests/python/data/fake_kind.c compiled with the system C compiler."""
    import fake_kind

    if fake_kind.C_COMPILER is None:
        pytest.skip("no C compiler (cc) to build the fake kind's library")
    return fake_kind.build_library(tmp_path_factory.mktemp("fake_kind"))


@pytest.fixture
def reference(fake_kind_library, monkeypatch) -> Path:
    """$FACT_REFERENCE_LIBRARY pointed at the fake kind's library for one test."""
    monkeypatch.setenv("FACT_REFERENCE_LIBRARY", str(fake_kind_library))
    return fake_kind_library


@pytest.fixture(scope="session")
def agent_cache(tmp_path_factory) -> Path:
    """One FACT cache for the agent tests of a session: kernels are built once (the cache is
    content-addressed); each test gets its own registry (agent_env)."""
    return tmp_path_factory.mktemp("fact_cache")


@pytest.fixture
def agent_env(agent_cache, tmp_path, monkeypatch) -> Path:
    """The environment the agent tests run in: the session's kernel cache, a fresh registry
    (returned), the interpreter for the CLI's Python steps, no LLM endpoint from outside."""
    import sys
    registry = tmp_path / "registry"
    monkeypatch.setenv("FACT_CACHE_DIR", str(agent_cache))
    monkeypatch.setenv("FACT_REGISTRY_DIR", str(registry))
    monkeypatch.setenv("FACT_PYTHON", sys.executable)
    for variable in ("FACT_AGENT_BASE_URL", "FACT_AGENT_MODEL", "FACT_AGENT_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    return registry


@pytest.fixture
def launches(monkeypatch) -> dict:
    """Counts fact::launch calls run on the CPU (FACT's kernels through the host reference or a
    host kernel library): {"calls": n}."""
    from fact import ops

    count = {"calls": 0}
    run = ops._run_on_cpu

    def counted(*args, **kwargs):
        count["calls"] += 1
        return run(*args, **kwargs)
    monkeypatch.setattr(ops, "_run_on_cpu", counted)
    return count
