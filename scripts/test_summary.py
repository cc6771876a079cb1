"""The end of the test command: every skipped test and its reason, C++ (CTest) and Python
(pytest), read from their JUnit XML files, as one section "Skipped (N)".

    python scripts/test_summary.py [--ctest ctest.xml] [--pytest pytest.xml]

A file that is missing (its suite did not run) is said so. Exit status 0 always: this only
reports; the suites' own exit status decides.
"""
from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

_GTEST_SKIP = re.compile(r"^(?:[^\n]*?: )?Skipped\n(?P<why>.*?)(?:\n\[  SKIPPED \]|\Z)", re.M | re.S)


def _gtest_reason(output: str) -> str:
    """The message of a GTEST_SKIP() << "..." in a test's output."""
    found = _GTEST_SKIP.search(output or "")
    if found and found.group("why").strip():
        return " ".join(found.group("why").split())
    return ""


def ctest_skipped(path: Path) -> list[tuple[str, str]]:
    """(test, reason) for every skipped or not-run test in CTest's --output-junit file."""
    skipped = []
    for case in ET.parse(path).getroot().iter("testcase"):
        status = case.get("status", "")
        marker = case.find("skipped")
        if marker is None and status not in ("notrun", "disabled", "skipped"):
            continue
        output = "".join(node.text or "" for node in case.iter("system-out"))
        reason = _gtest_reason(output)
        if not reason and marker is not None:
            reason = marker.get("message", "") or (marker.text or "").strip()
        if not reason:
            reason = f"ctest status {status or 'skipped'} (no message)"
        skipped.append((case.get("name", "?"), reason))
    return skipped


def _pytest_id(classname: str, name: str) -> str:
    """pytest's own spelling, path::[Class::]test, from JUnit's dotted classname."""
    parts = classname.split(".") if classname else []
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if Path(path).is_file():
            return "::".join([path, *parts[cut:], name])
    return "::".join([*([classname] if classname else []), name])


def pytest_skipped(path: Path) -> list[tuple[str, str]]:
    """(test, reason) for every skipped test in pytest's --junitxml file."""
    skipped = []
    for case in ET.parse(path).getroot().iter("testcase"):
        marker = case.find("skipped")
        if marker is None:
            continue
        name = _pytest_id(case.get("classname", ""), case.get("name", "?"))
        reason = marker.get("message", "") or (marker.text or "").strip()
        skipped.append((name, reason.removeprefix("Skipped: ") or "(no reason given)"))
    return skipped


def render(sections: list[tuple[str, Path | None, list[tuple[str, str]] | None]]) -> str:
    total = sum(len(items or []) for _, _, items in sections)
    lines = [f"== Skipped ({total})"]
    for title, path, items in sections:
        if items is None:
            lines.append(f"{title}: no results ({path} was not written: the suite did not run or crashed)")
            continue
        lines.append(f"{title} ({len(items)}):")
        width = max((len(name) for name, _ in items), default=0)
        for name, reason in items:
            lines.append(f"  {name.ljust(width)}  {reason}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctest", type=Path)
    parser.add_argument("--pytest", type=Path)
    args = parser.parse_args(argv)
    sections = []
    for title, path, read in (("C++ (ctest)", args.ctest, ctest_skipped),
                              ("Python (pytest)", args.pytest, pytest_skipped)):
        if path is None:
            continue
        try:
            sections.append((title, path, read(path)))
        except (OSError, ET.ParseError):
            sections.append((title, path, None))
    print(render(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
