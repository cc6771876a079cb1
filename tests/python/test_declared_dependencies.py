"""Every third-party module that the installed package `fact` imports is declared in
pyproject.toml (a dependency, or an extra for an optional feature), or comes with a declared
dependency: a `pip install .` into a clean environment then has what each feature needs. Read
from the sources (every `import`, also those inside functions) and from the installed
distributions' metadata, so the check needs no download."""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "python" / "fact"


def _imported_top_level_modules() -> dict[str, list[str]]:
    """Top-level module -> files of python/fact that import it (absolute imports only)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                found.setdefault(top, []).append(str(path.relative_to(REPO_ROOT)))
    return found


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_requirement_name(r) for r in requirements}


def _brought_by(declared: set[str]) -> set[str]:
    """Distributions that the declared ones require (one level down, as installed here)."""
    brought = set()
    for name in declared:
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        brought |= {_requirement_name(r) for r in requires if "extra ==" not in r}
    return brought


def test_every_third_party_import_is_declared_in_pyproject():
    declared = _declared()
    available = declared | _brought_by(declared)
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for module, files in _imported_top_level_modules().items():
        if module == "fact" or module in sys.stdlib_module_names:
            continue
        owners = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if not owners:
            pytest.fail(f"{module} (imported by {files[0]}) is not installed here: cannot tell "
                        f"which distribution provides it")
        if not owners & available:
            undeclared[module] = (sorted(owners), files)
    assert not undeclared, ("imported by the package but not declared in pyproject.toml "
                            f"(dependencies or an extra): {undeclared}")


def test_the_torch_requirement_names_the_version_the_project_pins():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    [torch] = [r for r in project["dependencies"] if _requirement_name(r) == "torch"]
    pinned = next(line for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
                  if line.startswith("torch=="))
    major_minor = ".".join(pinned.split("==")[1].split(".")[:2])
    assert f">={major_minor}" in torch, (torch, pinned)


# What each extra is for: the modules its feature imports.
EXTRA_FEATURES = {"mcp": "import fact.agent.mcp_server", "agent": "import fact.agent.llm, fact.agent.synthesize"}

BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in this extra)", name=name)
sys.meta_path.insert(0, _Block())
"""


@pytest.mark.parametrize("extra", sorted(EXTRA_FEATURES))
def test_each_extra_alone_is_enough_for_its_feature(extra, tmp_path):
    """`pip install ".[mcp]"` (or `.[agent]`) alone: the feature imports with the modules of the
    other extras' distributions hidden (those that neither the dependencies nor this extra bring)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    have = {_requirement_name(r) for r in project["dependencies"] + extras[extra]}
    have |= _brought_by(have)
    others = {_requirement_name(r) for name, reqs in extras.items() if name not in (extra, "all", "test")
              for r in reqs} - have
    modules_of = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    blocked = sorted(set().union(*(modules_of.get(d, set()) for d in others)))
    assert blocked, f"nothing to hide for the {extra} extra: {others}"
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT / "python")])}
    done = subprocess.run([sys.executable, "-c", EXTRA_FEATURES[extra]], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (f"the {extra} extra alone does not give its feature (hidden: {blocked}):\n"
                                  f"{done.stderr[-3000:]}")
