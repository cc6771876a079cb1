"""The README's commands work as written.

- The shell blocks marked `<!-- README test: runs on the CPU -->` run as written, in order, in a
  clean shell after `source build/activate`, from a folder laid out like the repository root.
- Every other `fact ...` and `python -m fact....` command the README shows (the *Command line*
  synopsis, the other blocks, the commands quoted in the text) names a subcommand or module that
  exists, and every option it uses is in that command's `--help`; where an option's values are
  written `a|b|c`, each is one the command accepts (its `--help` choices, else its help text).
- Every `bash scripts/...` it shows is a script of the repository.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import fact._engine

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
CPU_MARK = "<!-- README test: runs on the CPU -->"

try:
    ENGINE = fact._engine.engine_path()
except fact._engine.EngineNotFound:  # pragma: no cover - the test command builds it
    ENGINE = None
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no `fact` engine built")


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(info string, body, marked to run on the CPU) of every fenced code block."""
    blocks = []
    for match in re.finditer(r"^( *)```([^\n`]*)\n(.*?)^\1```\s*$", text, re.S | re.M):
        before = text[:match.start()].rstrip().splitlines()
        marked = bool(before) and before[-1].strip() == CPU_MARK
        body = "\n".join(line[len(match.group(1)):] for line in match.group(3).splitlines())
        blocks.append((match.group(2).strip(), body, marked))
    return blocks


def command_lines(body: str) -> list[str]:
    """The command lines of a block: comments cut off, indented lines joined to the line above
    (the synopsis writes an option list over several lines); Python and heredoc bodies skipped."""
    lines: list[str] = []
    heredoc_end = None
    for raw in body.splitlines():
        if heredoc_end is not None:
            if raw.strip() == heredoc_end:
                heredoc_end = None
            continue
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not line.strip():
            continue
        here = re.search(r"<<-?\s*'?(\w+)'?", line)
        if here:
            heredoc_end = here.group(1)
        if raw[:1].isspace() and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.strip())
    return lines


def readme_commands() -> list[str]:
    """Every `fact ...` / `python -m fact....` command of the README: block lines and inline code."""
    text = README.read_text()
    commands = []
    for info, body, _ in fenced_blocks(text):
        if info in ("", "bash", "sh", "console"):
            commands += [line for line in command_lines(body)
                         if line.startswith(("fact ", "python -m fact."))]
    prose = re.sub(r"^( *)```.*?^\1```", "", text, flags=re.S | re.M)
    commands += [span for span in re.findall(r"`([^`\n]+)`", prose)
                 if span.startswith(("fact ", "python -m fact."))]
    return commands


@functools.cache
def help_text(program: tuple[str, ...]) -> str:
    if program[0] == "fact":
        argv = [str(ENGINE), *program[1:], "--help"]
    else:
        argv = [sys.executable, "-m", program[1], "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(program)} --help failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def subcommands(program: tuple[str, ...]) -> set[str]:
    """The subcommands CLI11 lists under `Subcommands:` in the help of `program`."""
    text = help_text(program)
    if "Subcommands:" not in text:
        return set()
    section = text.split("Subcommands:", 1)[1]
    return set(re.findall(r"^  (\S+)", section, re.M))


def option_help(text: str, option: str) -> str | None:
    """The help entry of `option` (its line and the indented lines under it), or None."""
    lines = text.splitlines()
    pattern = re.compile(rf"(?<![\w-]){re.escape(option)}(?![\w-])")
    for index, line in enumerate(lines):
        names = line.strip().split("  ")[0]  # `-o,--out TEXT` (CLI11), `-o OUT, --out OUT` (argparse)
        if names.startswith("-") and pattern.search(names):
            entry = [line]
            for follow in lines[index + 1:]:
                if not follow.startswith(" " * 8) or follow.lstrip().startswith("-"):
                    break
                entry.append(follow)
            return "\n".join(entry)
    return None


def accepted_values(entry: str) -> set[str] | None:
    """The choices an option's help lists ({a,b,c}, CLI11's and argparse's), else None."""
    found = re.search(r"\{([^{}]+)\}", entry)
    return {v.strip() for v in found.group(1).split(",")} if found else None


def parse(command: str) -> tuple[tuple[str, ...], list[tuple[str, ...]], list[tuple[str, list[str]]]]:
    """(program, its subcommands' programs to check, [(option, values written a|b|c)])."""
    tokens = command.replace("[", " ").replace("]", " ").split()
    if tokens[0] == "python":
        program = ("python", tokens[2])
        rest = tokens[3:]
    else:
        program = ("fact",)
        rest = tokens[1:]
        while rest and rest[0] in subcommands(program):
            program += (rest.pop(0),)
    alternatives = [program[:-1] + (rest[i + 1],) for i, token in enumerate(rest[:-1])
                    if token == "|" and not rest[i + 1].startswith("-") and len(program) > 1
                    and program[-1] in subcommands(program[:-1])]
    options = []
    for i, token in enumerate(rest):
        name = token.split("=", 1)[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", name):
            value = rest[i + 1] if i + 1 < len(rest) else ""
            values = value.split("|") if "|" in value and value != "|" else []
            options.append((name, values))
    return program, alternatives, options


def test_the_readme_has_cpu_blocks_and_commands_to_check():
    marked = [body for _, body, is_marked in fenced_blocks(README.read_text()) if is_marked]
    assert len(marked) >= 2 and any("fact optimize" in body for body in marked), marked
    commands = readme_commands()
    assert len(commands) >= 20, commands
    for subcommand in ("discover", "realize", "plan", "tune", "bench", "optimize", "mcp", "registry"):
        assert any(c.startswith(f"fact {subcommand}") for c in commands), subcommand


def test_the_scripts_the_readme_runs_exist():
    text = README.read_text()
    scripts = set(re.findall(r"(?:bash|source) (scripts/[\w./-]+)", text))
    assert scripts, "no `bash scripts/...` command found in the README"
    for script in sorted(scripts):
        assert (REPO_ROOT / script).is_file(), f"README runs {script}, which does not exist"


@needs_engine
@pytest.mark.parametrize("command", readme_commands())
def test_each_readme_command_names_commands_and_options_that_exist(command):
    program, alternatives, options = parse(command)
    if program[0] == "fact":
        assert len(program) > 1 or options, f"`{command}`: no fact subcommand"
        if len(program) > 1:
            assert program[1] in subcommands(("fact",)), f"`{command}`: no subcommand {program[1]}"
    for alternative in alternatives:
        assert alternative[-1] in subcommands(alternative[:-1]), f"`{command}`: no subcommand {alternative}"
    text = help_text(program)
    # `fact bench conformance` hands the options it does not know to `python -m fact.conformance`
    # (its help says so).
    forwarded = (help_text(("python", "fact.conformance")) if program == ("fact", "bench")
                 and command.split()[2] == "conformance" else "")
    for option, values in options:
        entry = option_help(text, option) or option_help(forwarded, option)
        assert entry is not None, f"`{command}`: {' '.join(program)} has no option {option}:\n{text}"
        choices = accepted_values(entry)
        for value in values:
            if choices is not None:
                assert value in choices, f"`{command}`: {option} does not accept {value} ({entry.strip()})"
            else:
                assert re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", entry), \
                    f"`{command}`: {option}'s help does not mention {value} ({entry.strip()})"


def _activate_script() -> Path | None:
    if ENGINE is None:
        return None
    activate = Path(ENGINE).parent / "activate"
    return activate if activate.is_file() else None


@needs_engine
@pytest.mark.skipif(_activate_script() is None,
                    reason="no build/activate beside the engine (scripts/setup.sh writes it)")
def test_the_cpu_blocks_run_as_written(tmp_path):
    """A folder laid out like the repository root (build/ the engine's, bench/ the repository's)
    and a shell with nothing of this test's environment: `source build/activate`, then each
    marked block with `set -euo pipefail`."""
    (tmp_path / "build").symlink_to(_activate_script().parent)
    (tmp_path / "bench").symlink_to(REPO_ROOT / "bench")
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": "/usr/local/bin:/usr/bin:/bin",
           "LANG": "C.UTF-8", "TERM": "dumb"}
    for name in ("FACT_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    blocks = [body for _, body, marked in fenced_blocks(README.read_text()) if marked]
    for index, body in enumerate(blocks):
        script = f"set -euo pipefail\nsource build/activate\n{body}\n"
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, (f"README CPU block {index + 1} failed ({done.returncode}):\n{body}\n"
                                      f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
    assert (tmp_path / "out" / "tiny" / "report.md").is_file()
    assert (tmp_path / "out" / "steps" / "plan" / "plan.json").is_file()


def test_command_lines_join_the_synopsis_and_skip_comments_and_heredocs():
    body = ("fact plan g.json [-o dir]   # a comment\n"
            "              [--tune N]\n"
            "python - <<'EOF'\nimport fact  # not a command\nEOF\n"
            "fact mcp --list-tools\n")
    assert command_lines(body) == ["fact plan g.json [-o dir] [--tune N]", "python - <<'EOF'",
                                   "fact mcp --list-tools"]
