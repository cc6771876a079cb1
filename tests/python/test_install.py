"""`pip install ".[all]"` into a clean environment gives a working FACT, from the package's own
metadata alone: every dependency (PyTorch, nvidia-cutlass, numpy and the extras' matplotlib, mcp,
httpx) is resolved from the index by pip, nothing is borrowed from the development environment.
Then, from outside the checkout, as a new user: `fact --help`, `fact discover`, `fact optimize`
on a small model (kernels rendered, not compiled), every module of the installed package
imported (the extras' included: the MCP server, the agent's HTTP client, the plots), `fact mcp
--list-tools`, and `pip check`. A dependency that pyproject.toml does not declare fails it, with
the module that could not be imported.

One slow test (a fresh virtual environment: PyTorch from PyPI, several GB, then the engine built
through scikit-build-core). It runs when FACT_SLOW_TESTS is set and not "0" (scripts/run_tests.sh,
hence CI, sets it). It needs the network to PyPI: PyTorch comes from PyPI as a user gets it, with
its CUDA libraries (about 3 GB; the CPU wheel index download.pytorch.org is not reachable from
CI). pip's cache spares the download only where the index's answers may be cached (CI's network
answers without cache headers, so every run downloads). The engine's build folder is the
project's (build-pip/<wheel tag>/ in the checkout) and a second run reuses it, though the new
environment's interpreter path is compiled into the engine, so part of it recompiles (ccache, where
set up, makes that quick); $FACT_JOBS bounds its parallel compiles. The environment is deleted
afterwards.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SLOW = os.environ.get("FACT_SLOW_TESTS", "") not in ("", "0")

# Every module of the installed package, imported one by one in the new environment: an import
# that needs an undeclared distribution fails here with its name.
IMPORT_EVERY_MODULE = textwrap.dedent("""
    import importlib, importlib.util, json, pkgutil, sys, traceback
    import fact
    failed = {}
    # Python modules only: libfact.so is a ctypes library, not an extension module.
    names = [m.name for m in pkgutil.walk_packages(fact.__path__, "fact.")
             if not m.name.endswith(".__main__")
             and (m.ispkg or importlib.util.find_spec(m.name).origin.endswith(".py"))]
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as error:
            failed[name] = "".join(traceback.format_exception_only(type(error), error)).strip()
    if failed:
        print(json.dumps({"modules": names, "failed": failed}))
        sys.exit(0)
    import fact._engine as e, fact.native as n, fact.plots
    from fact.agent import llm, mcp_server
    import httpx, matplotlib, mcp, torch
    print(json.dumps({"modules": names, "failed": failed, "package": fact.__file__,
                      "engine": str(e.engine_path()), "library": str(e.engine_library_path()),
                      "version": e.engine_library().version(), "native_source": str(n.source_dir()),
                      "torch": torch.__version__, "httpx_client": llm.httpx.Client.__module__,
                      "mcp_server": mcp_server.__name__}))
""")

TINY_MODEL = REPO_ROOT / "bench" / "models" / "tiny_mlp.py"


def _clean_env(venv: Path) -> dict:
    """The environment of a user who activated `venv`: nothing pointing into the checkout or into
    the development environment."""
    dev_bin = Path(sys.executable).parent
    dev_build = os.environ.get("FACT_BUILD_DIR")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "FACT_ENGINE", "FACT_ENGINE_LIBRARY",
                        "FACT_REFERENCE_LIBRARY", "FACT_SOURCE_DIR", "FACT_PYTHON", "FACT_ROOT",
                        "FACT_VENV", "FACT_BUILD_DIR", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and Path(p) != dev_bin and not Path(p).is_relative_to(REPO_ROOT)
            and not (dev_build and Path(p) == Path(dev_build))]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    if os.environ.get("FACT_JOBS") and "CMAKE_BUILD_PARALLEL_LEVEL" not in env:
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = os.environ["FACT_JOBS"]
    return env


def _run(argv, env, cwd, timeout=600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{argv} failed ({done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return done


def _base_interpreter() -> str:
    """The Python this test runs on, outside any virtual environment (a venv made from a venv's
    python is based on the same base interpreter either way; this names it explicitly)."""
    return getattr(sys, "_base_executable", None) or sys.executable


@pytest.fixture
def fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([_base_interpreter(), "-m", "venv", str(venv)], check=True, timeout=300)
    yield venv
    shutil.rmtree(venv, ignore_errors=True)  # several GB: not left for pytest's tmp retention


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="slow (a clean venv: PyTorch from PyPI, the engine built by pip): "
                                     "runs with FACT_SLOW_TESTS=1, which scripts/run_tests.sh sets")
def test_pip_install_all_into_a_clean_venv_runs_fact_from_outside_the_checkout(fresh_venv, tmp_path):
    venv = fresh_venv
    python = venv / "bin" / "python"
    env = _clean_env(venv)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    # A clean environment: no system site-packages, nothing installed but pip.
    probe = _run([python, "-c", "import sys, json, importlib.util as u; print(json.dumps("
                  "[sys.prefix != sys.base_prefix, u.find_spec('torch') is None, u.find_spec('fact') is None]))"],
                 env, outside).stdout
    assert json.loads(probe) == [True, True, True], probe

    started = time.monotonic()
    install = _run([python, "-m", "pip", "install", "--progress-bar", "off", f"{REPO_ROOT}[all]"],
                   env, outside, timeout=3600)
    print(f"pip install .[all] into a clean venv took {time.monotonic() - started:.0f} s")
    assert "Successfully installed" in install.stdout and " fact-0.1.0" in install.stdout, install.stdout[-3000:]
    _run([python, "-m", "pip", "check"], env, outside)
    # pip's build folder is build-pip/<wheel tag>/ (pyproject.toml), never inside the development build/.
    assert list((REPO_ROOT / "build-pip").glob("*/CMakeCache.txt")), "no pip build in build-pip/"
    assert not list((REPO_ROOT / "build").glob("*/CMakeCache.txt")), "pip built inside build/"

    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        env, outside).stdout.strip())
    fact = venv / "bin" / "fact"
    assert fact.is_file(), f"no {fact}"
    assert (purelib / "fact" / "libfact.so").is_file()
    assert (purelib / "fact" / "_source" / "src" / "torch_ext" / "fact_launch_op.cpp").is_file()

    imported = _run([python, "-c", IMPORT_EVERY_MODULE], env, outside).stdout
    found = json.loads(imported.strip().splitlines()[-1])
    assert not found["failed"], f"modules of the installed package that do not import: {found['failed']}"
    assert {"fact.agent.mcp_server", "fact.agent.llm", "fact.plots", "fact.optimize_run"} <= set(found["modules"])
    assert Path(found["package"]).resolve().is_relative_to(purelib.resolve()), found
    assert Path(found["engine"]) == fact, found
    assert Path(found["library"]) == purelib / "fact" / "libfact.so", found
    assert found["version"].startswith("0."), found
    assert Path(found["native_source"]) == purelib / "fact" / "_source", found
    assert found["torch"].startswith("2.11."), found
    assert found["httpx_client"].startswith("httpx"), found

    help_text = _run(["fact", "--help"], env, outside).stdout
    for command in ("optimize", "discover", "realize", "plan", "mcp", "registry"):
        assert f"  {command} " in help_text, help_text

    graph = REPO_ROOT / "tests" / "data" / "graphs" / "mingpt_block_bf16.json"
    table = _run(["fact", "discover", graph, "--json", outside / "discovery.json"], env, outside).stdout
    assert "mlp_gelu_tanh" in table and "accepted" in table
    assert json.loads((outside / "discovery.json").read_text())["matches"]

    # A copy of the small model, so that nothing of the checkout is on the way.
    shutil.copy(TINY_MODEL, outside / "tiny_mlp.py")
    optimized = _run(["fact", "optimize", "tiny_mlp.py:TinyMLP", "--dtype", "bf16", "--no-compile",
                      "-o", "out"], env, outside, timeout=900)
    terminal = optimized.stdout + optimized.stderr
    out = outside / "out"
    for name in ("report.md", "report.html", "report.json", "graph.json", "plan/plan.json", "roofline.png",
                 "fact_tinymlp/__init__.py"):
        assert (out / name).is_file(), f"fact optimize wrote no {name}:\n{terminal[-4000:]}"
    assert "matplotlib is not available" not in terminal + (out / "report.md").read_text()
    loaded = _run([python, "-c", "import fact_tinymlp, torch\n"
                   "m = fact_tinymlp.load(device='cpu')\n"
                   "with torch.no_grad(): y = m(*fact_tinymlp.example_inputs('cpu'))\n"
                   "print(tuple(y.shape), y.dtype)"], env, out)
    assert loaded.stdout.strip().splitlines()[-1] == "(4, 32, 128) torch.bfloat16", loaded.stdout

    tools = _run(["fact", "mcp", "--list-tools"], env, outside).stdout
    for tool in ("capture_model", "discover", "device_status"):
        assert tool in tools, tools
