"""Loading FACT kernel libraries (include/fact/runtime/fact_abi.h) with ctypes.

A library exports `fact_kernel_info()` (its KernelSpec as JSON, with "entry": the symbol of its
entry point) and the entry `int fact_<key16>(const FactGemmArgs*, void* workspace,
size_t* workspace_size, cudaStream_t stream)`. `FactGemmArgs` below mirrors the C struct field
for field; tests/python/test_compose.py checks its offsets against the header with the C
compiler. Loaded libraries are kept in a process-wide registry and addressed by an integer
handle, which is what the `fact::gemm` custom op carries; the native implementation
(fact.native) keeps a registry with the same handles.
"""
from __future__ import annotations

import ctypes
import json
import threading
from pathlib import Path

FACT_ABI_VERSION = 1

FACT_STATUS_NAMES = {
    0: "FACT_OK",
    1: "FACT_ERR_INVALID_ARGS",
    2: "FACT_ERR_CANNOT_IMPLEMENT",
    3: "FACT_ERR_WORKSPACE",
    4: "FACT_ERR_INITIALIZE",
    5: "FACT_ERR_LAUNCH",
    6: "FACT_ERR_INTERNAL",
}
FACT_OK = 0
FACT_ERR_CANNOT_IMPLEMENT = 2


class FactGemmArgs(ctypes.Structure):
    """ctypes mirror of `FactGemmArgs` in fact_abi.h (same order, same C types)."""

    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
        ("batch", ctypes.c_int64),
        ("a", ctypes.c_void_p), ("lda", ctypes.c_int64), ("stride_a", ctypes.c_int64),
        ("b", ctypes.c_void_p), ("ldb", ctypes.c_int64), ("stride_b", ctypes.c_int64),
        ("c", ctypes.c_void_p), ("ldc", ctypes.c_int64), ("stride_c", ctypes.c_int64),
        ("d", ctypes.c_void_p), ("ldd", ctypes.c_int64), ("stride_d", ctypes.c_int64),
        ("bias", ctypes.c_void_p),
        ("alpha", ctypes.c_float),
        ("beta", ctypes.c_float),
        ("act_p0", ctypes.c_float), ("act_p1", ctypes.c_float),
        ("split_k", ctypes.c_int32),
        ("sm_count", ctypes.c_int32),
    ]


_ENTRY_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(FactGemmArgs), ctypes.c_void_p,
                                    ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p)


class KernelLoadError(RuntimeError):
    pass


class KernelLibrary:
    """One loaded kernel library: its spec (`info`) and a callable entry point."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._dll = ctypes.CDLL(str(self.path))
        except OSError as error:
            raise KernelLoadError(f"cannot load kernel library {self.path}: {error}") from error
        try:
            info_function = self._dll.fact_kernel_info
        except AttributeError as error:
            raise KernelLoadError(f"{self.path} does not export fact_kernel_info") from error
        info_function.restype = ctypes.c_char_p
        info_function.argtypes = []
        self.info: dict = json.loads(info_function().decode())
        self.entry_name: str = self.info.get("entry", "")
        if not self.entry_name:
            raise KernelLoadError(f"{self.path}: fact_kernel_info has no \"entry\"")
        try:
            symbol = getattr(self._dll, self.entry_name)
        except AttributeError as error:
            raise KernelLoadError(f"{self.path} does not export {self.entry_name}") from error
        self._entry = _ENTRY_PROTOTYPE(ctypes.cast(symbol, ctypes.c_void_p).value)

    @property
    def key(self) -> str:
        return self.info.get("key", self.entry_name)

    def workspace_size(self, args: FactGemmArgs) -> int:
        """Bytes of device workspace the kernel needs for `args` (a size query, no launch)."""
        size = ctypes.c_size_t(0)
        status = self._entry(ctypes.byref(args), None, ctypes.byref(size), None)
        if status != FACT_OK:
            raise KernelLaunchError(status, f"{self.entry_name}: workspace size query")
        return int(size.value)

    def launch(self, args: FactGemmArgs, workspace: int | None, stream: int) -> int:
        """Launches on `stream` (a cudaStream_t as an integer); returns the FactStatus."""
        return int(self._entry(ctypes.byref(args), workspace or None, None, stream or None))


class KernelLaunchError(RuntimeError):
    def __init__(self, status: int, what: str):
        self.status = status
        super().__init__(f"{what} failed: {FACT_STATUS_NAMES.get(status, status)}")


_registry_lock = threading.RLock()
_libraries: list[KernelLibrary] = []
_handle_by_path: dict[str, int] = {}


def load(path: str | Path) -> int:
    """Loads a library once per process; returns its handle for `fact::gemm`.

    The handle is the same in the native implementation's registry (fact.native): on a machine
    with a GPU the first load builds and installs that implementation (fact.ops), and every
    library is registered with it too."""
    resolved = str(Path(path).resolve())
    with _registry_lock:
        if resolved in _handle_by_path:
            return _handle_by_path[resolved]
        library = KernelLibrary(resolved)
        _libraries.append(library)
        handle = len(_libraries) - 1
        _handle_by_path[resolved] = handle
        _register_with_native(handle, resolved)
        return handle


def _register_with_native(handle: int, path: str) -> None:
    from fact import native, ops  # fact.ops imports this module
    if native.active():
        try:
            native_handle = native.register_kernel(path)
        except RuntimeError as error:  # ctypes loaded it, the native registry could not
            _libraries.pop()
            del _handle_by_path[path]
            raise KernelLoadError(f"{path}: native kernel registry: {error}") from error
        if native_handle != handle:
            raise KernelLoadError(f"{path}: native kernel registry handle {native_handle} "
                                  f"differs from the Python registry's {handle}")
        return
    import torch
    if torch.cuda.is_available():
        ops.use_native_if_available()  # registers every library loaded so far


def loaded_paths() -> list[str]:
    """The loaded libraries' resolved paths, by handle."""
    return [str(library.path) for library in list(_libraries)]


def library(handle: int) -> KernelLibrary:
    if handle < 0 or handle >= len(_libraries):
        raise KeyError(f"no FACT kernel library with handle {handle}")
    return _libraries[handle]


def handle_for_key(key: str) -> int:
    """Handle of a loaded library whose key (or entry name) is `key`; -1 when none is loaded."""
    for handle, lib in enumerate(_libraries):
        if key and (lib.key == key or lib.entry_name == key or lib.key.startswith(key)):
            return handle
    return -1
