"""scripts/setup.sh leaves the user ready and their shell as it was: sourcing it changes no shell
option (no `set -euo pipefail` left behind), puts `fact` and the `fact` Python package on the
paths, writes build/activate (the one line it prints), and that line works in a fresh shell.

Runs the real script against the engine build the test command already made (everything is in
place then, so it only checks and re-links); skipped where there is no such build."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("FACT_BUILD_DIR", REPO_ROOT / "build"))

needs_build = pytest.mark.skipif(not (BUILD / "build.ninja").is_file() or not os.environ.get("FACT_VENV"),
                                 reason="needs the set-up's engine build and environment (scripts/run_tests.sh "
                                        "runs scripts/setup.sh first)")

PROBE = r'''
set +euo pipefail
before=$(set +o)
source scripts/setup.sh >"$SETUP_LOG" 2>&1 || { echo "setup failed"; exit 3; }
after=$(set +o)
[ "$before" = "$after" ] && echo "options: unchanged" || { echo "options changed:"; diff <(echo "$before") <(echo "$after"); }
echo "fact: $(command -v fact)"
python -c "import fact, fact._engine as e; print('package:', fact.__file__); print('engine:', e.engine_path())"
'''


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FACT_ENGINE", "VIRTUAL_ENV")}
    # A user's plain shell: no FACT environment on PATH yet.
    venv_bin = str(Path(os.environ["FACT_VENV"]) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if p not in (venv_bin, str(BUILD)))
    env["FACT_BUILD_DIR"] = str(BUILD)
    return env


@needs_build
def test_sourcing_setup_changes_no_shell_option_and_puts_fact_on_path(tmp_path):
    env = _env()
    env["SETUP_LOG"] = str(tmp_path / "setup.log")
    done = subprocess.run(["bash", "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    setup_log = Path(env["SETUP_LOG"]).read_text()
    assert done.returncode == 0, done.stdout + done.stderr + setup_log
    assert "options: unchanged" in done.stdout, done.stdout
    assert f"fact: {BUILD / 'fact'}" in done.stdout, done.stdout
    assert f"package: {REPO_ROOT / 'python' / 'fact' / '__init__.py'}" in done.stdout, done.stdout
    assert f"source {BUILD / 'activate'}" in setup_log, setup_log  # the one line it prints


@needs_build
def test_the_printed_activate_line_works_in_a_fresh_shell(tmp_path):
    activate = BUILD / "activate"
    if not activate.is_file():
        pytest.skip("build/activate is written by scripts/setup.sh")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = subprocess.run(["bash", "-c", f"source {activate} && command -v fact && fact --help >/dev/null && "
                                         "python -c 'import fact; print(fact.__file__)' && [[ $- != *e* ]] && echo no-errexit"],
                          cwd=outside, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split()
    assert lines[0] == str(BUILD / "fact")
    assert lines[1] == str(REPO_ROOT / "python" / "fact" / "__init__.py")
    assert lines[2] == "no-errexit"
