"""Loading FACT kernel libraries (docs/abi.md) with ctypes, whatever their kind.

A library exports `fact_kernel_info()` (JSON with "kind", "entry", "key", "name", ...) and the
entry `int fact_<key>(const FactCallHeader* args, void* workspace, size_t* workspace_size,
void* stream)`. The arguments are an argument image (bytes the plan gives, addresses filled
in by fact.ops); this module never looks inside it. Used by the ctypes implementation of
`fact::launch` on CUDA (the fallback when the native one cannot be built); the native one
(src/torch_ext/fact_launch_op.cpp) dlopens the same libraries itself.
"""
from __future__ import annotations

import ctypes
import json
import threading
from pathlib import Path

from fact.abi import FACT_OK, status_name

_ENTRY_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p)


class KernelLoadError(RuntimeError):
    pass


class KernelLaunchError(RuntimeError):
    def __init__(self, status: int, what: str):
        self.status = status
        super().__init__(f"{what} failed: {status_name(status)}")


class KernelLibrary:
    """One loaded kernel library: its `info` (fact_kernel_info, {} when it has none) and its
    entry, `entry` when given, else fact_kernel_info's "entry"."""

    def __init__(self, path: str | Path, entry: str | None = None):
        self.path = Path(path)
        try:
            self._dll = ctypes.CDLL(str(self.path))
        except OSError as error:
            raise KernelLoadError(f"cannot load kernel library {self.path}: {error}") from error
        self.info: dict = {}
        info_function = getattr(self._dll, "fact_kernel_info", None)
        if info_function is not None:
            info_function.restype = ctypes.c_char_p
            info_function.argtypes = []
            text = info_function()
            try:
                self.info = json.loads(text.decode()) if text else {}
            except ValueError as error:
                raise KernelLoadError(f"{self.path}: fact_kernel_info is not JSON ({error})") from error
        self.entry_name: str = entry or str(self.info.get("entry", ""))
        if not self.entry_name:
            raise KernelLoadError(f"{self.path}: no entry named (the plan gives none and "
                                  f"fact_kernel_info has no \"entry\")")
        try:
            symbol = getattr(self._dll, self.entry_name)
        except AttributeError as error:
            raise KernelLoadError(f"{self.path} does not export {self.entry_name}") from error
        self.entry_address: int = ctypes.cast(symbol, ctypes.c_void_p).value
        self._entry = _ENTRY_PROTOTYPE(self.entry_address)

    def workspace_size(self, args: int) -> int:
        """Bytes of device workspace the kernel needs for the argument image at address `args`
        (a size query, no launch)."""
        size = ctypes.c_size_t(0)
        status = self._entry(args, None, ctypes.byref(size), None)
        if status != FACT_OK:
            raise KernelLaunchError(status, f"{self.entry_name}: workspace size query")
        return int(size.value)

    def launch(self, args: int, workspace: int | None, stream: int) -> int:
        """Launches on `stream` (a cudaStream_t as an integer); returns the FactStatus."""
        return int(self._entry(args, workspace or None, None, stream or None))


_lock = threading.Lock()
_loaded: dict[tuple[str, str], KernelLibrary] = {}


def load(path: str | Path, entry: str | None = None) -> KernelLibrary:
    """The library at `path` with entry `entry` (default: fact_kernel_info's), loaded once per
    process. Raises KernelLoadError."""
    resolved = str(Path(path).resolve())
    key = (resolved, entry or "")
    with _lock:
        if key not in _loaded:
            _loaded[key] = KernelLibrary(resolved, entry)
        return _loaded[key]
