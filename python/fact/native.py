"""The native (C++) CUDA implementation of `fact::launch`: building, loading and describing it.

The source is `src/torch_ext/fact_launch_op.cpp` (not part of the CMake build). It is compiled
with `torch.utils.cpp_extension` the first time a call with a kernel library is registered
(`fact.ops.register_call` on a machine with a GPU), into
`<FACT cache root>/torch_ext/<key>/`, where the key hashes the source, the engine headers it includes, the
torch version and its CUDA version, so a changed source or another torch builds anew. The build
runs in a child process (so a crashing compiler or loader cannot take the caller down) under a
file lock (two processes never build the same key at once); a failed build is remembered in the
same folder (`failed.txt`, with the compiler's tail) and not retried for that key.

    available() -> bool     the native implementation can run here (builds it if needed)
    reason() -> str         why not ("" when available)
    ensure_built() -> bool  compiles it (or finds it compiled) without loading it
    describe() -> str       which implementation runs CUDA tensors' fact::launch now

`FACT_NATIVE=0` turns the native implementation off (the Python ctypes path then runs).
`python -m fact.native [--force]` builds it and prints `describe()`.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

EXTENSION_NAME = "fact_native"
BUILD_TIMEOUT_S = 900
_PACKAGE_DIR = Path(__file__).resolve().parent


def source_dir() -> Path:
    """The folder holding src/torch_ext and include/: `$FACT_SOURCE_DIR`, else the copy a pip
    install bundles in this package (`_source/`), else the checkout's root."""
    explicit = os.environ.get("FACT_SOURCE_DIR")
    if explicit:
        return Path(explicit)
    bundled = _PACKAGE_DIR / "_source"
    if (bundled / "src" / "torch_ext").is_dir():
        return bundled
    return _PACKAGE_DIR.parents[1]


def source_files() -> list[Path]:
    return [source_dir() / "src" / "torch_ext" / "fact_launch_op.cpp"]


def abi_header() -> Path:
    return source_dir() / "include" / "fact" / "core" / "fact_abi.h"


def headers() -> list[Path]:
    """The engine headers the extension includes: the kernel ABI and the FactStatus names."""
    return [abi_header(), source_dir() / "include" / "fact" / "core" / "status_names.hpp"]


def cache_root() -> Path:
    """The FACT cache root, as the engine computes it (src/realize/kernel_cache.cpp)."""
    if os.environ.get("FACT_CACHE_DIR"):
        return Path(os.environ["FACT_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "fact"
    if os.environ.get("HOME"):
        return Path(os.environ["HOME"]) / ".cache" / "fact"
    return Path(tempfile.gettempdir()) / "fact-cache"


def build_key() -> str:
    """Hash of what the built library depends on: sources, ABI header, torch and CUDA versions."""
    digest = hashlib.sha256()
    for path in [*source_files(), *headers()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"torch {torch.__version__} cuda {torch.version.cuda} "
                  f"python {sys.version_info[:2]}".encode())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return cache_root() / "torch_ext" / build_key()


def library_path() -> Path:
    return build_dir() / f"{EXTENSION_NAME}.so"


_state_lock = threading.Lock()
_built: bool | None = None    # None: not tried in this process
_reason = ""
_active = False               # the native library is loaded and registered for fact::launch


def _set_unavailable(why: str) -> bool:
    global _built, _reason
    _built, _reason = False, why
    return False


def mark_unavailable(why: str) -> None:
    """Records that the built library cannot be used in this process (e.g. it failed to load)."""
    global _active
    with _state_lock:
        _active = False
        _set_unavailable(why)


def _missing_prerequisite() -> str:
    """Why building cannot even start here ("" when it can)."""
    if os.environ.get("FACT_NATIVE", "1") == "0":
        return "turned off with FACT_NATIVE=0"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is not a CUDA build"
    missing = [str(p) for p in [*source_files(), *headers()] if not p.is_file()]
    if missing:
        return f"source not found: {', '.join(missing)} (set FACT_SOURCE_DIR to the FACT checkout)"
    from torch.utils import cpp_extension
    if cpp_extension.CUDA_HOME is None:
        return "no CUDA toolkit found (CUDA_HOME) for the CUDA headers"
    return ""


def ensure_built(force: bool = False) -> bool:
    """Compiles the extension into build_dir() unless a build of this key exists (or failed
    before: then False with that reason, unless `force`). Does not load it."""
    global _built, _reason
    with _state_lock:
        if _built is not None and not force:
            return _built
        missing = _missing_prerequisite()
        if missing:
            return _set_unavailable(missing)
        folder = build_dir()
        folder.mkdir(parents=True, exist_ok=True)
        stamp, failed = folder / "built.json", folder / "failed.txt"
        with open(folder.parent / f"{folder.name}.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
            if stamp.is_file() and library_path().is_file():
                _built, _reason = True, ""
                return True
            if failed.is_file() and not force:
                return _set_unavailable(failed.read_text())
            why = _build_in_child(folder)
            if why:
                failed.write_text(why)
                return _set_unavailable(why)
            failed.unlink(missing_ok=True)
            stamp.write_text(json.dumps({
                "key": build_key(), "torch": torch.__version__, "cuda": torch.version.cuda,
                "sources": [str(p) for p in source_files()],
                "date": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2) + "\n")
        _built, _reason = True, ""
        return True


def _build_in_child(folder: Path) -> str:
    """Runs `python -m fact.native --build-into folder`; returns "" or why it failed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PACKAGE_DIR.parent),
                                                      env.get("PYTHONPATH", "")]))
    # The source is C++ only (no device code), but cpp_extension derives nvcc architecture flags
    # anyway and fails on a machine without a GPU unless a list is given.
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    command = [sys.executable, "-m", "fact.native", "--build-into", str(folder)]
    started = time.monotonic()
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True,
                                timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"the native extension build took over {BUILD_TIMEOUT_S} s and was stopped"
    if result.returncode != 0 or not library_path().is_file():
        tail = (result.stdout + result.stderr)[-3000:]
        return (f"the native extension failed to build (exit {result.returncode} after "
                f"{time.monotonic() - started:.0f} s); compiler output tail:\n{tail}")
    return ""


def _build_here(folder: Path) -> None:
    """The child's work: compile and link with torch.utils.cpp_extension, then load the result
    once (which checks that every symbol resolves)."""
    from torch.utils import cpp_extension
    cpp_extension.load(
        name=EXTENSION_NAME,
        sources=[str(p) for p in source_files()],
        extra_include_paths=[str(source_dir() / "include")],
        extra_cflags=["-O2"],
        build_directory=str(folder),
        with_cuda=True,
        is_python_module=False,
        verbose=True,
    )


def load_library() -> None:
    """Loads the built library into this process, which registers its fact::launch and
    fact::launch_out kernels (CUDA, Autograd) and the fact_native ops. Call through fact.ops,
    which first removes the Python kernels the native ones replace."""
    global _active
    if not ensure_built():
        raise RuntimeError(f"the native fact::launch is not available: {_reason}")
    torch.ops.load_library(str(library_path()))
    _active = True


def available() -> bool:
    """True when the native implementation can run here: a GPU, and the extension builds."""
    if _active:
        return True
    if _built is None and not torch.cuda.is_available():
        return _set_unavailable("no CUDA device")
    return ensure_built()


def reason() -> str:
    return "" if _active or _built else _reason


def active() -> bool:
    """Whether the native library is loaded and runs CUDA tensors' fact::launch."""
    return _active


def register_call(image_hex: str, slot_offsets, slot_sources, slot_indices,
                  slot_element_offsets, results, operands, operand_layout_checked,
                  library: str, entry: str, label: str) -> int:
    """Registers a call with the native registry (fact.ops.register_call does; its numbering
    is the Python registry's); returns its number there."""
    return int(torch.ops.fact_native.register_call(
        image_hex, list(slot_offsets), list(slot_sources), list(slot_indices),
        list(slot_element_offsets), list(results), list(operands), list(operand_layout_checked),
        library, entry, label))


def register_sizes(call: int, *, edges, edge_counts, term_starts, coefficients, exponents,
                   result_polys, result_ranks, operand_polys, operand_ranks, slot_polys,
                   patch_offsets, patch_bytes, patch_polys, bucket_images, bucket_libraries,
                   bucket_entries) -> None:
    """Makes a registered call symbolic in the native registry (fact.ops._native_size_tables
    writes the tables: the bucket edges, one polynomial table, and indices into it for every
    shape, stride, element offset and patch; one image, library and entry per bucket)."""
    torch.ops.fact_native.register_sizes(
        call, list(edges), list(edge_counts), list(term_starts), list(coefficients),
        list(exponents), list(result_polys), list(result_ranks), list(operand_polys),
        list(operand_ranks), list(slot_polys), list(patch_offsets), list(patch_bytes),
        list(patch_polys), list(bucket_images), list(bucket_libraries), list(bucket_entries))


def registered_libraries() -> list[str]:
    """The kernel libraries the native registry has loaded, in loading order."""
    return list(torch.ops.fact_native.registered_libraries()) if _active else []


def describe() -> str:
    """One line saying which implementation runs fact::launch on CUDA tensors, and why."""
    if _active:
        return f"native C++ ({library_path()})"
    if _built:
        return ("Python ctypes (native C++ built, not loaded: it loads with the first call "
                "registered with a kernel library on a GPU)")
    if _built is None:
        return ("Python ctypes until a call with a kernel library is registered on a GPU "
                "(the native C++ implementation is built then)")
    return f"Python ctypes (native C++ unavailable: {_reason.splitlines()[0] if _reason else '?'})"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--build-into":
        _build_here(Path(sys.argv[2]))
    else:
        ok = ensure_built(force="--force" in sys.argv)
        print(f"built: {ok}  ({library_path() if ok else reason()})")
        sys.exit(0 if ok else 1)
