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


# --------------------------------------------------------------------------------------------
# Layers. The engine's folders, lowest first: a file in include/fact/<layer>/ or src/<layer>/
# includes headers of its own layer or of layers below it, never of one above. `core` is the
# ground floor: the kernel C ABI (fact_abi.h, fact_subgraph_abi.h), element types, precision
# modes and tolerances, FactStatus names; every other folder builds on it.
#   core       the C ABI and the vocabulary tables (dtype, precision, status names)
#   util       files, locks, processes, hashes, JSON field helpers
#   graph      the captured graph and its tensors
#   problem    problem kinds: descriptions, argument images, host references, device profiles
#   runtime    loading and running kernel libraries on the device, timing, reports
#   discover   canonicalization, rules, matches
#   realize    kernel specs, rendering, compiling, tuning, the tuning database
#   registry   verified kernels by (rule, dtype, arch)
#   compose    plans and reports
#   engine     the in-process API and its C API
#   cli        the `fact` command line
#   torch_ext  the PyTorch launch op (built on its own from headers)
# include/fact/runtime/fact_abi.h and fact_subgraph_abi.h stay as forwarding headers (to core/):
# generated kernels, pattern ABI headers and kernels stored in registries include them by that
# path.
LAYERS = ("core", "util", "graph", "problem", "runtime", "discover", "realize", "registry", "compose",
          "engine", "cli", "torch_ext")
INCLUDE = re.compile(r'#\s*include\s*"fact/([a-z_]+)/')


def layer_of(path: Path, root: Path = ROOT) -> str | None:
    parts = path.relative_to(root).parts
    if parts[:2] == ("include", "fact") and len(parts) > 3:
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def layer_violations(path: Path, root: Path = ROOT) -> list[str]:
    layer = layer_of(path, root)
    if layer is None:
        return []
    if layer not in LAYERS:
        return [f"{path.relative_to(root)}: folder {layer!r} is not in LAYERS (add it where it belongs)"]
    found = []
    for number, line in enumerate(without_comments(path.read_text()).splitlines(), 1):
        included = INCLUDE.search(line)
        if not included:
            continue
        target = included.group(1)
        if target not in LAYERS:
            found.append(f"{path.relative_to(root)}:{number}: includes from {target!r}, a folder not in LAYERS")
        elif LAYERS.index(target) > LAYERS.index(layer):
            found.append(f"{path.relative_to(root)}:{number}: {layer} includes {target}, a higher layer: "
                         f"{line.strip()}")
    return found


def test_src_mirrors_include():
    """src/<layer>/X.cpp implements include/fact/<layer>/X.hpp: a source that includes a header of
    its own name from another layer's folder implements that header in the wrong place."""
    problems = []
    for source in sorted((ROOT / "src").rglob("*.cpp")):
        for layer, stem in re.findall(r'#\s*include\s*"fact/([a-z_]+)/([a-z_0-9]+)\.(?:hpp|h)"', source.read_text()):
            if stem == source.stem and layer != layer_of(source):
                problems.append(f"{source.relative_to(ROOT)} implements include/fact/{layer}/{stem}")
    assert not problems, "\n".join(problems)


def test_no_layer_includes_a_higher_one():
    problems = [v for f in engine_files() for v in layer_violations(f)]
    assert not problems, "\n".join(problems)


def test_the_layer_check_catches_an_upward_include(tmp_path):
    (tmp_path / "include" / "fact" / "runtime").mkdir(parents=True)
    bad = tmp_path / "include" / "fact" / "runtime" / "bad.hpp"
    bad.write_text('#include "fact/core/fact_abi.h"\n'
                   '// #include "fact/realize/kernel_spec.hpp" in a comment is fine\n'
                   '#include "fact/realize/kernel_spec.hpp"\n'
                   '#include "fact/nowhere/x.hpp"\n')
    found = layer_violations(bad, root=tmp_path)
    assert [v.split(":")[1] for v in found] == ["3", "4"], found


# --------------------------------------------------------------------------------------------
# GEMM vocabulary. The engine knows no kind, so GEMM words belong in patterns/. The rule: in
# src/ and include/, with comments and string literals removed, no identifier contains "gemm"
# (any case) or "epilogue" (any case), and none is exactly lda, ldb, ldc or ldd. The identifiers
# below are allowed, each for its reason; a new one fails the test.
GEMM_WORDS = re.compile(r"\b\w*(?:gemm|epilogue)\w*\b|\b(?:lda|ldb|ldc|ldd)\b", re.I)
DEVICE_PEAK = "the device profile measures the device's peak matrix-multiply rates with cuBLAS (every kind's roofline reads them)"
SGEMM = "the strict precision contract compares a kernel's error with the framework's float32 path, cuBLAS SGEMM"
GEMM_SHORTHAND = "`fact run/tune --epilogue`: the command line's shorthand that builds a problem string for the gemm kind"
GEMM_ALLOWED = {
    "src/runtime/device_probe.cpp": ({"GemmRate", "measure_gemm", "gemm_size", "cublas_square_gemm", "cublasGemmEx",
                                      "CUBLAS_GEMM_DEFAULT"}, DEVICE_PEAK),
    "include/fact/runtime/device_probe.hpp": ({"gemm_size"}, DEVICE_PEAK),
    "src/cli/device_command.cpp": ({"gemm_size"}, DEVICE_PEAK),
    "include/fact/core/precision.hpp": ({"kSgemmErrorRatioLimit"}, SGEMM),
    "src/engine/engine_tables.cpp": ({"kSgemmErrorRatioLimit"}, SGEMM),
    "src/cli/run_command.cpp": ({"epilogue"}, GEMM_SHORTHAND),
    "src/cli/tune_command.cpp": ({"epilogue"}, GEMM_SHORTHAND),
}


def gemm_words_in(path: Path, root: Path = ROOT) -> list[str]:
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', without_comments(path.read_text()))
    allowed = GEMM_ALLOWED.get(str(path.relative_to(root)), (set(), ""))[0]
    found = []
    for number, line in enumerate(code.splitlines(), 1):
        for word in GEMM_WORDS.findall(line):
            if word not in allowed:
                found.append(f"{path.relative_to(root)}:{number}: GEMM vocabulary {word!r} outside patterns/")
    return found


def test_engine_speaks_no_gemm():
    problems = [v for f in engine_files() for v in gemm_words_in(f)]
    assert not problems, "\n".join(problems)


def test_every_gemm_allowance_is_still_needed():
    """An allowance whose file no longer uses the word is removed, so the list stays the truth."""
    stale = []
    for name, (words, _reason) in GEMM_ALLOWED.items():
        path = ROOT / name
        code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', without_comments(path.read_text())) if path.exists() else ""
        stale += [f"{name}: {word}" for word in words if not re.search(rf"\b{word}\b", code)]
    assert not stale, "\n".join(stale)


def test_the_gemm_check_catches_identifiers_not_comments_or_strings(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text('int lda = 0;  // gemm in a comment\n'
                   'auto s = "epilogue";\n'
                   'struct GemmThing {};\n'
                   'int ldamax = 1;\n')
    found = gemm_words_in(bad, root=tmp_path)
    assert [v.split(":")[1] for v in found] == ["1", "3"], found


# --------------------------------------------------------------------------------------------
# patterns/gemm is the GEMM, not a second home for the patterns built on it. A pattern that
# produces gemm problems through the GEMM's discovery chain (mlp, swiglu, ...) or registers an
# epilogue step of its own (patterns/<name>/epilogue_steps.def: its rows of the one step table)
# keeps its rule, steps, kernel pieces, references, tests and docs in its folder. So no file
# under patterns/gemm (code, comments, docs, tests) names such a pattern or one of its steps
# (their names, kernel tokens, C and C++ names); the GEMM reaches them through the step table's
# columns and the hooks they register.
STEP_ROW = re.compile(r'^FACT_GEMM_STEP\(\s*(\w+)\s*,\s*(\w+)\s*,\s*\d+\s*,\s*"(\w+)"\s*,\s*"(\w+)"', re.M)
GEMM_TEXT = SOURCES + (".def", ".md", ".py")


def normalized(text: str) -> str:
    """Identifiers as lowercase words joined by `_`: RowScale -> row_scale, FACT_STEP_GLU ->
    fact_step_glu, SwiGLU -> swi_glu (a lowercase letter or digit before a capital starts a word)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text).lower()


def patterns_built_on_gemm(root: Path = ROOT) -> dict[str, set[str]]:
    """{folder: the words that name it or its steps} for every pattern folder other than gemm
    that registers epilogue steps or includes the GEMM's discovery headers."""
    built = {}
    for folder in sorted((root / "patterns").iterdir()):
        if not folder.is_dir() or folder.name == "gemm" or folder.name.startswith((".", "_")):
            continue
        fragment = folder / "epilogue_steps.def"
        uses_chain = any('patterns/gemm/discover/' in f.read_text(errors="replace")
                         for f in folder.rglob("*") if f.suffix in SOURCES)
        if not fragment.exists() and not uses_chain:
            continue
        words = {folder.name}
        if fragment.exists():
            for c_name, cpp_name, name, token in STEP_ROW.findall(fragment.read_text()):
                words |= {normalized(c_name), normalized(cpp_name), name, token}
        built[folder.name] = words
    return built


def other_pattern_words_in(path: Path, built: dict[str, set[str]], root: Path = ROOT) -> list[str]:
    """Each line is searched as identifiers split into words (RowScale -> row_scale) and as
    written in lowercase (RoPE -> rope, SwiGLU -> swiglu)."""
    found = []
    text = path.read_text(errors="replace")
    for number, (split, plain) in enumerate(zip(normalized(text).splitlines(), text.lower().splitlines()), 1):
        for folder, words in built.items():
            for word in sorted(words):
                pattern = rf"(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])"
                if re.search(pattern, split) or re.search(pattern, plain):
                    found.append(f"{path.relative_to(root)}:{number}: names {word!r} (patterns/{folder})")
    return found


def test_patterns_built_on_gemm_are_found():
    built = patterns_built_on_gemm()
    assert {"mlp", "swiglu", "rope", "rmsnorm"} <= set(built), built
    assert {"glu", "rope", "row_scale", "rowscale"} <= set().union(*built.values()), built


def test_gemm_names_no_pattern_built_on_it():
    built = patterns_built_on_gemm()
    files = sorted(f for f in (ROOT / "patterns" / "gemm").rglob("*") if f.suffix in GEMM_TEXT)
    problems = [v for f in files for v in other_pattern_words_in(f, built)]
    assert not problems, "\n".join(problems)


def test_the_gemm_folder_check_catches_steps_in_any_spelling(tmp_path):
    (tmp_path / "patterns" / "gemm").mkdir(parents=True)
    folder = tmp_path / "patterns" / "fancy"
    folder.mkdir()
    (folder / "epilogue_steps.def").write_text(
        'FACT_GEMM_STEP(ROW_SHIFT, RowShift, 14, "row_shift", "rowshift", fact::gemm::epilogue::RowShift, '
        'ROW_VECTOR, NONE, 0, fact::gemm::ops::RowShiftStep, 1.0, "", "", "")\n')
    built = patterns_built_on_gemm(tmp_path)
    assert built == {"fancy": {"fancy", "row_shift", "rowshift"}}
    bad = tmp_path / "patterns" / "gemm" / "bad.cuh"
    bad.write_text("case FACT_STEP_ROW_SHIFT:\n"      # 1: the C name
                   "struct RowShift {};\n"            # 2: the C++ name
                   "// the rowshift token\n"          # 3: the kernel token, in a comment
                   "// a fancy folder\n"              # 4: the folder
                   "// Fancy's RowSHIFT\n"            # 5: as written, in lowercase
                   "int row_shifted = 0;\n"           # a longer word: not the step
                   "int prowshift = 0;\n")            # nor this
    found = other_pattern_words_in(bad, built, root=tmp_path)
    assert sorted({int(v.split(":")[1]) for v in found}) == [1, 2, 3, 4, 5], found
