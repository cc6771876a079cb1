"""Vetted examples for a subgraph, most relevant first: kernels of the pattern registry (verified
by the gates, or built-in templates) and the CUTLASS examples shipped in the installed
`nvidia-cutlass` wheel (cutlass_library/source/examples, never copied into FACT).

Relevance is keyword overlap (TF-IDF weighted) between the query — the match's rule, the ATen
ops of its reference semantics, its dtype and architecture — and each example's path and text,
with synonyms for the names CUTLASS uses (attention -> fmha, ...). What the task computes
decides: an example must share a word of its ops or kind (architecture words alone never
qualify one and weigh little), and one whose path names another element type (an int4 or
fp8 GEMM for a float32 task) is pushed down. Registry kernels of the same rule or pattern, or
computing the same ATen ops, come first; other registry entries are not examples for it.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

WORD = re.compile(r"[a-z][a-z0-9]+")
SYNONYMS = {
    "attention": ["attention", "fmha", "softmax", "flash"],
    "scaled": ["attention", "fmha"],
    "causal": ["causal", "mask"],
    "softmax": ["softmax"],
    "gemm": ["gemm", "matmul", "collective", "builder"],
    "linear": ["gemm", "bias"],
    "addmm": ["gemm", "bias"],
    "mm": ["gemm"],
    "bmm": ["gemm", "batched"],
    "matmul": ["gemm"],
    "gelu": ["gelu", "epilogue", "activation"],
    "relu": ["relu", "epilogue", "activation"],
    "silu": ["silu", "swiglu", "epilogue"],
    "swiglu": ["silu", "gated", "dual"],
    "layer": ["layernorm"],
    "norm": ["layernorm", "norm"],
    "bfloat16": ["bf16", "bfloat16"],
    "float16": ["fp16", "half"],
    "sm": ["hopper", "sm90", "warp", "specialized", "tma"],
}
STOPWORDS = {"aten", "default", "float32", "host", "tensor", "int"}
# Words about where a kernel runs, not what it computes: they rank, at a small weight, only
# examples that already share a word of the task's ops or kind.
ARCH_WORDS = {"sm", "hopper", "sm90", "warp", "specialized", "tma", "90a"}
ARCH_WEIGHT = 0.15
# Element types an example's path may name; one the task does not use marks another problem.
TYPE_WORDS = {"int4": "int4", "int8": "int8", "s8": "int8", "u8": "int8", "fp8": "fp8", "e4m3": "fp8",
              "e5m2": "fp8", "f8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "mxfp8": "fp8",
              "fp6": "fp6", "bf16": "bfloat16", "fp16": "float16", "f16": "float16", "tf32": "float32",
              "fp32": "float32", "f32": "float32", "fp64": "float64", "f64": "float64", "complex": "complex"}
OTHER_TYPE_FACTOR = 0.25
EXTENSIONS = (".cu", ".cuh", ".hpp", ".h", ".cpp", ".md")
EXCERPT_CHARS = 1500


@dataclass
class Example:
    source: str        # "registry" | "cutlass"
    id: str            # registry id, or path relative to the examples folder
    title: str
    score: float
    excerpt: str
    path: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def cutlass_examples_dir() -> Path | None:
    """cutlass_library/source/examples of the installed wheel, or None."""
    try:
        import cutlass_library  # noqa: WPS433 - optional: only for this lookup
    except ImportError:
        return None
    folder = Path(cutlass_library.__file__).resolve().parent / "source" / "examples"
    return folder if folder.is_dir() else None


def query_words(text: str) -> list[str]:
    words = []
    for word in WORD.findall(text.lower().replace("_", " ").replace(".", " ")):
        if word in STOPWORDS:
            continue
        words.append(word)
        words.extend(SYNONYMS.get(word, []))
    return words


def task_query(task: dict) -> str:
    """Words describing an agent task: rule, pattern, ATen targets, dtype, arch."""
    match = task.get("match", {})
    nodes = task.get("semantics", {}).get("fragment", {}).get("nodes", [])
    targets = " ".join(n.get("target", "") for n in nodes)
    return " ".join([match.get("rule", ""), match.get("pattern", ""), targets, match.get("dtype", ""),
                     task.get("arch", "")])


@lru_cache(maxsize=2)
def _index(folder: str) -> tuple:
    """(documents, document frequency): one per example file, its words counted."""
    documents = []
    frequency: dict[str, int] = {}
    root = Path(folder)
    for path in sorted(root.rglob("*")):
        if path.suffix not in EXTENSIONS or not path.is_file() or path.stat().st_size > 400_000:
            continue
        if path.parent == root:  # the folder's own README and CMake lists
            continue
        relative = str(path.relative_to(root))
        try:
            head = path.read_text(errors="replace")[:20000]
        except OSError:
            continue
        counts: dict[str, int] = {}
        for word in WORD.findall((relative.replace("_", " ").replace("/", " ") + " ") * 5 + head.lower()):
            counts[word] = counts.get(word, 0) + 1
        documents.append((relative, counts, head))
        for word in counts:
            frequency[word] = frequency.get(word, 0) + 1
    return documents, frequency


def _after_license(head: str) -> list[str]:
    """The file's lines after its license header (CUTLASS files open with the BSD text)."""
    lines = head.splitlines()
    for number, line in enumerate(lines[:60]):
        if "POSSIBILITY OF SUCH DAMAGE" in line:
            rest = lines[number + 1:]
            while rest and set(rest[0].strip()) <= set("*/ "):
                rest = rest[1:]
            return rest
    return lines


def _title(relative: str, head: str) -> str:
    for line in _after_license(head)[:40]:
        stripped = line.strip(" /*!#\t")
        if len(stripped) > 20 and not stripped.lower().startswith(("copyright", "spdx", "redistribution",
                                                                    "all rights")):
            return stripped[:120]
    return relative


def _excerpt(head: str, words: set[str]) -> str:
    """The densest window of the file in query words (comment headers skipped)."""
    lines = _after_license(head)
    best, best_score = 0, -1
    for start in range(0, max(len(lines) - 30, 1), 10):
        window = " ".join(lines[start:start + 40]).lower()
        score = sum(window.count(w) for w in words)
        if score > best_score:
            best, best_score = start, score
    return "\n".join(lines[best:best + 40])[:EXCERPT_CHARS]


def _types_named(relative: str) -> set[str]:
    return {TYPE_WORDS[w] for w in re.findall(r"[a-z0-9]+", relative.lower()) if w in TYPE_WORDS}


def cutlass_examples(query: str, k: int = 4, dtype: str = "") -> list[Example]:
    folder = cutlass_examples_dir()
    if folder is None:
        return []
    documents, frequency = _index(str(folder))
    words = query_words(query)
    if not words:
        return []
    core = {w for w in words if w not in ARCH_WORDS and w not in TYPE_WORDS.values() and w not in TYPE_WORDS}
    total = len(documents)
    scored = []
    for relative, counts, head in documents:
        score, shared = 0.0, False
        for word in set(words):
            if word in counts:
                weight = ARCH_WEIGHT if word in ARCH_WORDS else 1.0
                score += weight * (1 + math.log(counts[word])) * math.log(1 + total / frequency[word])
                shared = shared or word in core
        if not shared or score <= 0:
            continue
        named = _types_named(relative)
        if dtype and named - {dtype}:
            score *= OTHER_TYPE_FACTOR
        scored.append((score, relative, head))
    scored.sort(key=lambda item: -item[0])
    seen_folders: set[str] = set()
    out = []
    for score, relative, head in scored:
        folder_name = relative.split("/")[0]
        if folder_name in seen_folders:  # one file per example folder
            continue
        seen_folders.add(folder_name)
        out.append(Example("cutlass", relative, _title(relative, head), round(score, 2),
                           _excerpt(head, set(words)), str(folder / relative)))
        if len(out) >= k:
            break
    return out


def _targets(fragment: dict) -> set[str]:
    return {n.get("target", "") for n in (fragment or {}).get("nodes", []) if n.get("target")}


def registry_examples(task: dict, entries: list[dict], k: int = 3) -> list[Example]:
    """Registry entries for the task's rule (same rule first, kernels with sources first)."""
    match = task.get("match", {})
    rule, pattern = match.get("rule", ""), match.get("pattern", "")
    ops = _targets(task.get("semantics", {}).get("fragment", {}))
    ranked = []
    for entry in entries:
        # What it computes first: the same rule, the same pattern, or the same ATen ops. An entry
        # sharing only dtype or arch (another problem altogether) is no example for this task.
        score = 0.0
        if entry.get("rule") == rule:
            score += 10
        elif pattern and entry.get("pattern") == pattern:
            score += 5
        elif ops and ops & _targets((entry.get("reference") or {}).get("fragment", {})):
            score += 4
        else:
            continue
        if entry.get("dtype") == match.get("dtype"):
            score += 1
        if entry.get("arch") == task.get("arch"):
            score += 1
        if isinstance(entry.get("source"), dict) and entry["source"].get("text"):
            score += 2
        ranked.append((score, entry))
    ranked.sort(key=lambda item: -item[0])
    # Kernels with sources first; one built-in template at most (its realizers, not code).
    chosen, templates = [], 0
    for score, entry in ranked:
        is_template = not (isinstance(entry.get("source"), dict) and entry["source"].get("text"))
        if is_template and templates >= 1:
            continue
        templates += is_template
        chosen.append((score, entry))
    out = []
    for score, entry in chosen[:k]:
        text = entry.get("source", {}).get("text", "") if isinstance(entry.get("source"), dict) else ""
        excerpt = text[:4000] if text else json_brief(entry.get("template", {}))
        out.append(Example("registry", entry.get("id", ""), f"{entry.get('id')} ({entry.get('origin')})", score, excerpt))
    return out


def json_brief(doc: dict) -> str:
    import json
    return json.dumps(doc, indent=1)[:EXCERPT_CHARS]


def retrieve(task: dict, registry_entries: list[dict], k: int = 5) -> list[Example]:
    """The most relevant vetted examples for an agent task: registry kernels, then CUTLASS."""
    found = registry_examples(task, registry_entries, k=min(2, k))
    found += cutlass_examples(task_query(task), k=max(k - len(found), 1),
                              dtype=task.get("match", {}).get("dtype", ""))
    return found[:k]
