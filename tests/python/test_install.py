"""`pip install .` gives a working FACT: the `fact` command in the environment's bin/, libfact
inside the installed `fact` package, and the package importable from outside the checkout.

One slow test (it builds the engine through scikit-build-core: minutes on a small machine). It
runs when FACT_SLOW_TESTS is set and not "0" (scripts/run_tests.sh, hence CI, sets it). It needs
no GPU and no network: the new virtual environment sees this interpreter's packages (torch,
nvidia-cutlass, scikit-build-core) through a .pth file, and pip runs with --no-index and
--no-build-isolation. The build folder is the project's default (build/<wheel tag>/), so a second
run is incremental.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SLOW = os.environ.get("FACT_SLOW_TESTS", "") not in ("", "0")


def _clean_env(venv: Path) -> dict:
    """The environment of a user who activated `venv`: nothing pointing into the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "FACT_ENGINE", "FACT_ENGINE_LIBRARY", "FACT_REFERENCE_LIBRARY",
                        "FACT_SOURCE_DIR", "FACT_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def _run(argv, env, cwd, timeout=300) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="slow (builds the engine with pip): runs with FACT_SLOW_TESTS=1, "
                                     "which scripts/run_tests.sh sets")
def test_pip_install_gives_the_fact_command_and_package(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    # This interpreter's packages (torch, pip, scikit-build-core, ...) without downloading them.
    (purelib / "_fact_test_base.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = _clean_env(venv)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    started = time.monotonic()
    install = _run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                    "--progress-bar", "off", REPO_ROOT], env, outside, timeout=3000)
    print(f"pip install . took {time.monotonic() - started:.0f} s")
    assert "Successfully installed fact" in install.stdout

    fact = venv / "bin" / "fact"
    assert fact.is_file(), f"no {fact}"
    assert (purelib / "fact" / "libfact.so").is_file()
    assert (purelib / "fact" / "_source" / "src" / "torch_ext" / "fact_launch_op.cpp").is_file()

    help_text = _run(["fact", "--help"], env, outside).stdout
    assert "optimize" in help_text and "discover" in help_text

    graph = REPO_ROOT / "tests" / "data" / "graphs" / "mingpt_block_bf16.json"
    table = _run(["fact", "discover", graph, "--json", outside / "discovery.json"], env, outside).stdout
    assert "mlp_gelu_tanh" in table and "accepted" in table
    assert json.loads((outside / "discovery.json").read_text())["matches"]

    probe = _run([python, "-c", (
        "import json, fact, fact._engine as e, fact.native as n\n"
        "print(json.dumps({'package': fact.__file__, 'engine': str(e.engine_path()),\n"
        "  'library': str(e.engine_library_path()), 'version': e.engine_library().version(),\n"
        "  'native_source': str(n.source_dir())}))")], env, outside).stdout
    found = json.loads(probe.strip().splitlines()[-1])
    assert Path(found["package"]).resolve().is_relative_to(purelib.resolve()), found
    assert Path(found["engine"]) == fact, found
    assert Path(found["library"]) == purelib / "fact" / "libfact.so", found
    assert found["version"].startswith("0."), found
    assert Path(found["native_source"]) == purelib / "fact" / "_source", found
