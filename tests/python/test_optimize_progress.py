"""What `fact optimize` shows while it compiles, as CI, `| tee` or a notebook see it (output not a
terminal) and on a terminal: the discovery table (what will be built, and why) and the list of
kernels to compile come before the first compile ends; progress lines follow while compiling,
each with the kernel's whole name; <out>/logs/optimize.log holds the same lines, the engine's
included. Also that `fact optimize --help` shows the agent options' real defaults.

The compiles run through the engine's build driver with a stand-in for nvcc ($FACT_NVCC: a
script that takes a few seconds per kernel and writes an empty library; the CPU path verifies
with the host reference and never loads it), so these run in about a minute wherever the engine
is built. `test_with_nvcc_*` compiles real CUTLASS kernels: it skips, saying so, where nvcc is
absent."""
from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fact._engine
from fact.agent.synthesize import Budget

try:
    ENGINE = fact._engine.engine_path()
except fact._engine.EngineNotFound:  # pragma: no cover - the test command builds it
    ENGINE = None
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no `fact` engine built")

NVCC = os.environ.get("FACT_NVCC") or shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)

MODEL = textwrap.dedent('''
    import torch


    class TwoLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(256, 512)
            self.fc2 = torch.nn.Linear(512, 256)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))


    class OneLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(256, 512)

        def forward(self, x):
            return self.fc(x)


    def get_inputs(dtype=torch.float32, device="cpu"):
        return [torch.randn(256, 256, dtype=dtype, device=device)]
''')

# Answers --version like a compiler, takes SECONDS per kernel, writes an empty library at -o.
FAKE_NVCC = textwrap.dedent('''\
    #!/bin/sh
    if [ "$1" = "--version" ]; then echo "stand-in nvcc for FACT's progress tests"; exit 0; fi
    out=""; previous=""
    for argument in "$@"; do
      [ "$previous" = "-o" ] && out="$argument"
      previous="$argument"
    done
    sleep SECONDS
    : > "$out"
''')

PROGRESS_LINE = re.compile(r"^realize: (\d+)/(\d+) kernels compiled \((.+)\) (\S+) elapsed")


def _env(tmp: Path, nvcc: str | None) -> dict:
    """A fresh kernel cache (every kernel is compiled) and the compiler."""
    env = {k: v for k, v in os.environ.items() if k not in ("FACT_LOG_DIR", "FACT_VERBOSE")}
    env["FACT_CACHE_DIR"] = str(tmp / "cache")
    if nvcc:
        env["FACT_NVCC"] = nvcc
    return env


def _fake_nvcc(folder: Path, seconds: float) -> str:
    path = folder / "nvcc"
    path.write_text(FAKE_NVCC.replace("SECONDS", str(seconds)))
    path.chmod(0o755)
    return str(path)


def _optimize(folder: Path, model: str, env: dict, *extra: str) -> tuple[str, Path]:
    """`fact optimize` with its output a pipe (stdout and stderr together, as `2>&1 | tee`)."""
    (folder / "model.py").write_text(MODEL)
    out = folder / "out"
    done = subprocess.run([str(ENGINE), "optimize", f"model.py:{model}", "--dtype", "bf16",
                           "--max-candidates", "1", "-j", "2", "-o", str(out), *extra],
                          cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=900)
    assert done.returncode == 0, done.stdout
    return done.stdout, out


def _check_plan_output(text: str, kernels: int) -> list[str]:
    """The order a user needs: discovery, the list to compile, progress, then the tables. Returns
    the names listed to compile."""
    lines = text.splitlines()
    discover = next(i for i, line in enumerate(lines) if line.startswith("== discover"))
    header = next(i for i, line in enumerate(lines) if re.match(r"realize: \d+ kernel\(s\): .* to compile", line))
    assert discover < header, text
    assert lines[header].endswith(":") and f"{kernels} to compile" in lines[header], lines[header]
    names = [line.strip() for line in lines[header + 1:header + 1 + kernels]]
    assert all(lines[header + 1 + k].startswith("  ") for k in range(kernels)), text
    progress = [(i, PROGRESS_LINE.match(line)) for i, line in enumerate(lines) if PROGRESS_LINE.match(line)]
    assert len(progress) == kernels, text
    assert all(header + kernels < i for i, _ in progress), "the list comes before any compile ends"
    assert sorted(m.group(1) for _, m in progress) == [str(k) for k in range(1, kernels + 1)], text
    # Each kernel's progress line holds its whole name, as listed.
    assert sorted(m.group(3) for _, m in progress) == sorted(names), (names, text)
    done = next(i for i, line in enumerate(lines) if line.startswith(f"realize: {kernels}/{kernels} kernels compiled in "))
    table = next(i for i, line in enumerate(lines) if line.startswith("== realize: "))
    assert max(i for i, _ in progress) < done < table, text
    assert "\r" not in text and "\033" not in text, "no terminal controls in a pipe"
    return names


@needs_engine
def test_a_pipe_sees_the_plan_first_then_progress_and_the_log_keeps_it_all(tmp_path):
    text, out = _optimize(tmp_path, "TwoLayer", _env(tmp_path, _fake_nvcc(tmp_path, 3)))
    names = _check_plan_output(text, kernels=2)
    assert all(name.startswith("gemm") and len(name) > 32 for name in names), names
    log = (out / "logs" / "optimize.log").read_text()
    # Every line the engine printed is in the log, in the same order.
    engine_part = text[text.index("== plan"):text.index("== package")]
    assert engine_part in log, log
    _check_plan_output(log[log.index("== plan"):], kernels=2)


@needs_engine
def test_a_long_compile_is_never_silent(tmp_path):
    """One kernel that compiles for longer than the 30 s between lines while waiting: a line
    says how long it has run (no time-left guess from nothing finished)."""
    text, out = _optimize(tmp_path, "OneLayer", _env(tmp_path, _fake_nvcc(tmp_path, 35)), "--no-tune")
    waiting = [line for line in text.splitlines() if line.startswith("realize: 0/1 kernels compiled")]
    assert waiting and "elapsed, waiting on the last one" in waiting[0] and "left" not in waiting[0], text
    assert waiting[0] in (out / "logs" / "optimize.log").read_text()


@needs_engine
def test_a_terminal_gets_a_status_line_and_the_log_gets_lines(tmp_path):
    """On a pseudo-terminal: the status line is redrawn in place (kernel names stay whole, on
    their own lines), and optimize.log holds progress lines without terminal controls."""
    (tmp_path / "model.py").write_text(MODEL)
    out = tmp_path / "out"
    controller, terminal = os.openpty()
    env = {**_env(tmp_path, _fake_nvcc(tmp_path, 3)), "COLUMNS": "120"}
    process = subprocess.Popen([str(ENGINE), "optimize", "model.py:TwoLayer", "--dtype", "bf16", "-j", "2",
                                "-o", str(out)], cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=terminal,
                               stderr=terminal, env=env)
    os.close(terminal)
    shown = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 600)
        if not ready:
            process.kill()
            pytest.fail("no output for 600 s: " + shown.decode(errors="replace"))
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert process.wait(timeout=60) == 0, shown.decode(errors="replace")
    text = shown.decode(errors="replace")
    assert "\r\033[2Krealize [" in text, text  # the bar, drawn in place
    # What stays on the screen: of each line, what was written after its last carriage return.
    screen = "\n".join(line.rpartition("\r")[2].replace("\033[2K", "")
                       for line in text.replace("\r\n", "\n").split("\n"))
    names = _check_plan_output(screen, kernels=2)
    log = (out / "logs" / "optimize.log").read_text()
    assert "\033" not in log and "\r" not in log
    _check_plan_output(log[log.index("== plan"):], kernels=2)
    assert all(name in log for name in names)


@needs_engine
@pytest.mark.skipif(NVCC is None, reason="nvcc not found (set FACT_NVCC or put nvcc on PATH): real kernel "
                                         "compiles not tested")
def test_with_nvcc_the_plan_and_progress_come_before_and_during_the_compile(tmp_path):
    """The same order with the real compiler on one CUTLASS kernel (a minute or two)."""
    text, out = _optimize(tmp_path, "OneLayer", _env(tmp_path, NVCC), "--no-tune")
    _check_plan_output(text, kernels=1)
    log = (out / "logs" / "optimize.log").read_text()
    _check_plan_output(log[log.index("== plan"):], kernels=1)


@needs_engine
def test_help_shows_the_agent_budget_defaults_that_apply():
    """The agent options' shown defaults are the budget the agent uses (no `=0` meaning 4)."""
    text = subprocess.run([str(ENGINE), "optimize", "--help"], capture_output=True, text=True, check=True).stdout
    shown = {name: re.search(rf"--agent-{name} [\w:]+=(\S+)", text) for name in ("attempts", "max-tokens", "seconds")}
    assert all(shown.values()), text
    assert int(shown["attempts"].group(1)) == Budget.attempts
    assert int(shown["max-tokens"].group(1)) == Budget.tokens
    assert float(shown["seconds"].group(1)) == Budget.seconds
