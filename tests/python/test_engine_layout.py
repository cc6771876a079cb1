"""The engine knows no pattern (docs/architecture.md): nothing in src/ or include/ includes a
header from patterns/, spells a pattern folder's name as a string, or reaches into a pattern's
namespace. Patterns register themselves; adding one adds a folder and touches nothing here."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")


def pattern_folders() -> set[str]:
    return {p.name for p in (ROOT / "patterns").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}


def without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def engine_files() -> list[Path]:
    return sorted(f for folder in ("src", "include") for f in (ROOT / folder).rglob("*")
                  if f.suffix in SOURCES)


def violations_in(path: Path, names: set[str], root: Path = ROOT) -> list[str]:
    found = []
    code = without_comments(path.read_text())
    for number, line in enumerate(code.splitlines(), 1):
        where = f"{path.relative_to(root)}:{number}"
        if re.search(r'#\s*include\s*[<"]patterns/', line):
            found.append(f"{where}: includes a pattern header: {line.strip()}")
        for literal in re.findall(r'"((?:[^"\\]|\\.)*)"', line):
            if literal in names or literal.startswith("patterns/"):
                found.append(f"{where}: names the pattern {literal!r}")
        for name in names:
            if re.search(rf"\b{re.escape(name)}::", line):
                found.append(f"{where}: uses the namespace of pattern {name!r}")
    return found


def test_pattern_folders_exist():
    assert {"gemm", "attention"} <= pattern_folders()


def test_engine_names_no_pattern():
    names = pattern_folders()
    problems = [v for f in engine_files() for v in violations_in(f, names)]
    assert not problems, "\n".join(problems)


def test_the_check_catches_each_kind_of_violation_and_ignores_comments(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text('#include "patterns/gemm/kind/problem.hpp"\n'
                   '// a comment may say "gemm" and gemm::\n'
                   'auto kind = std::string("gemm");\n'
                   'gemm::GemmProblem p;\n')
    found = violations_in(bad, {"gemm"}, root=tmp_path)
    assert sorted({v.split(":")[1] for v in found}) == ["1", "3", "4"], found
