"""Locating and calling the C++ engine: the engine library in process (libfact, its C API in
include/fact/engine/c_api.h, through ctypes) and, for callers that still chain commands, the
`fact` executable.

Installed (`pip install .`) copies come before a source tree's build/:

The executable: $FACT_ENGINE, the `fact` executable in this environment's scripts folder (a
pip install puts it there: the environment's bin/, or next to this interpreter),
<repo>/build/fact, then `fact` on PATH.

The library (`libfact.so`): $FACT_ENGINE_LIBRARY (when set, that one or none), then inside this package (a pip install puts
it there), then next to the executable found as above ($FACT_ENGINE's folder first), then
<repo>/build/. The host reference (`fact_reference_call`,
what `fact::launch` runs for CPU tensors) comes from $FACT_REFERENCE_LIBRARY when set (tests
point it at a library of their own), else from that library.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Callable

LIBRARY_NAME = "libfact.dylib" if sys.platform == "darwin" else "libfact.so"
_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parents[1]
# c_api.h's fact_output_fn: void (*)(int kind, const char* text, void* user).
OUTPUT_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class EngineNotFound(RuntimeError):
    """The engine (executable, library, or a symbol of its C API) is not there; the message
    says what was looked for and where."""


def engine_path() -> Path:
    """Path of the `fact` executable; raises EngineNotFound with what was tried."""
    tried = []
    env = os.environ.get("FACT_ENGINE")
    if env:
        if Path(env).is_file():
            return Path(env)
        tried.append(f"$FACT_ENGINE={env}")
    for folder in _script_folders():
        installed = folder / "fact"
        if installed.is_file():
            return installed
        tried.append(str(installed))
    repo_build = _REPO_ROOT / "build" / "fact"
    if repo_build.is_file():
        return repo_build
    tried.append(str(repo_build))
    on_path = shutil.which("fact")
    if on_path:
        return Path(on_path)
    raise EngineNotFound("FACT engine not found (tried: " + ", ".join(tried) +
                         "); build it with `bash scripts/setup.sh` or `pip install .`")


def _script_folders() -> list[Path]:
    """Where a pip install puts console scripts for this interpreter: its scripts folder, and
    the folder of the interpreter itself (a virtual environment's bin/)."""
    folders = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        folders.append(Path(scripts))
    folders.append(Path(sys.executable).parent)
    return list(dict.fromkeys(folders))


def installed_library_path() -> Path:
    """Where a pip install puts libfact: inside this package."""
    return _PACKAGE_DIR / LIBRARY_NAME


def run_engine(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    """Runs `fact <args>`; raises RuntimeError with the engine's stderr when it fails."""
    proc = subprocess.run([str(engine_path()), *args], text=True,
                          capture_output=capture)
    if check and proc.returncode != 0:
        raise RuntimeError(f"fact {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def engine_library_path() -> Path:
    """Path of the engine library (libfact); raises EngineNotFound with what was tried."""
    tried: list[str] = []
    explicit = os.environ.get("FACT_ENGINE_LIBRARY")
    if explicit:  # named explicitly: that one or none (no silent fall-back to another build)
        if Path(explicit).is_file():
            return Path(explicit)
        raise EngineNotFound(f"FACT engine library not found (tried: $FACT_ENGINE_LIBRARY={explicit}); "
                             f"point $FACT_ENGINE_LIBRARY at libfact.so or unset it")
    installed = installed_library_path()
    if installed.is_file():
        return installed
    tried.append(str(installed))
    folders: list[Path] = []
    if os.environ.get("FACT_ENGINE"):
        folders.append(Path(os.environ["FACT_ENGINE"]).parent)
    try:
        folders.append(engine_path().parent)
    except EngineNotFound:
        pass
    folders.append(_REPO_ROOT / "build")
    for folder in dict.fromkeys(folders):
        candidate = folder / LIBRARY_NAME
        if candidate.is_file():
            return candidate
        tried.append(str(candidate))
    raise EngineNotFound("FACT engine library not found (tried: " + ", ".join(tried) +
                         "); build the engine with `bash scripts/setup.sh`, or set "
                         "$FACT_ENGINE_LIBRARY")


class EngineLibrary:
    """The engine's C API in this process (include/fact/engine/c_api.h)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._dll = ctypes.CDLL(str(self.path))
        except OSError as error:
            raise EngineNotFound(f"cannot load the engine library {self.path}: {error}") from error

    def _function(self, name: str, restype, argtypes):
        try:
            function = getattr(self._dll, name)
        except AttributeError:
            raise EngineNotFound(f"the engine library {self.path} does not export {name} "
                                 f"(built before that part of the C API existed?)") from None
        function.restype = restype
        function.argtypes = argtypes
        return function

    def has(self, name: str) -> bool:
        return hasattr(self._dll, name)

    def version(self) -> str:
        """fact_engine_version(): "<version> <git sha>"."""
        return self._function("fact_engine_version", ctypes.c_char_p, [])().decode()

    def tables(self) -> str:
        """fact_engine_tables(): the engine's vocabulary tables, a JSON document."""
        return self._function("fact_engine_tables", ctypes.c_char_p, [])().decode()

    def plan(self, request: dict) -> tuple[int, dict]:
        """fact_engine_plan(request) -> (return code, response document)."""
        plan_function = self._function("fact_engine_plan", ctypes.c_int,
                                       [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)])
        free = self._function("fact_engine_free", None, [ctypes.c_void_p])
        response = ctypes.c_void_p()
        code = int(plan_function(json.dumps(request).encode(), ctypes.byref(response)))
        if not response.value:
            return code, {"status": "error", "error": f"fact_engine_plan returned {code} and no response"}
        try:
            text = ctypes.string_at(response.value).decode()
        finally:
            free(response)
        try:
            return code, json.loads(text)
        except ValueError:
            return code, {"status": "error", "error": f"fact_engine_plan's response is not JSON: {text[:200]}"}


    def call_json_with_output(self, function_name: str, request: dict,
                              output: Callable[[int, str], None]) -> tuple[int, dict]:
        """A JSON-in, JSON-out function that also writes lines as it works
        (`int f(const char*, fact_output_fn, void*, char**)`: fact_optimize_plan_output, c_api.h):
        `output(kind, text)` is called for each, from the engine's threads too (kind 0 a line,
        1 the status line to redraw in place, 2 a line for the log only)."""
        function = self._function(function_name, ctypes.c_int,
                                  [ctypes.c_char_p, OUTPUT_FUNCTION, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)])
        free = self._function("fact_engine_free", None, [ctypes.c_void_p])

        def relay(kind: int, text: bytes, _user) -> None:
            try:
                output(int(kind), (text or b"").decode(errors="replace"))
            except Exception:  # noqa: BLE001 - a display that fails must not unwind into the engine
                pass

        callback = OUTPUT_FUNCTION(relay)  # kept alive for the call
        response = ctypes.c_void_p()
        code = int(function(json.dumps(request).encode(), callback, None, ctypes.byref(response)))
        if not response.value:
            return code, {"status": "error", "error": f"{function_name} returned {code} and no response"}
        try:
            text = ctypes.string_at(response.value).decode(errors="replace")
        finally:
            free(response)
        try:
            return code, json.loads(text)
        except ValueError:
            return code, {"status": "error", "error": f"{function_name}'s response is not JSON: {text[:200]}"}

    def call_json(self, function_name: str, request: dict) -> tuple[int, dict]:
        """Any JSON-in, JSON-out function of the C API (`int f(const char*, char**)`: the agent
        API and the registry, c_api.h) -> (return code, response document)."""
        function = self._function(function_name, ctypes.c_int,
                                  [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)])
        free = self._function("fact_engine_free", None, [ctypes.c_void_p])
        response = ctypes.c_void_p()
        code = int(function(json.dumps(request).encode(), ctypes.byref(response)))
        if not response.value:
            return code, {"status": "error", "error": f"{function_name} returned {code} and no response"}
        try:
            text = ctypes.string_at(response.value).decode(errors="replace")
        finally:
            free(response)
        try:
            return code, json.loads(text)
        except ValueError:
            return code, {"status": "error", "error": f"{function_name}'s response is not JSON: {text[:200]}"}


    def verify_call(self, request: dict, entry_address: int, fill, reference, baseline=None,
                    baseline_name: str = "pytorch") -> tuple[int, dict]:
        """fact_verify_call (c_api.h): FACT's one verifier on the kernel entry at `entry_address`
        for the call in `request`. `fill(index, operand_addresses)` writes input set `index` into
        host buffers laid out as each operand's strided storage; `reference(operand_addresses,
        result_addresses)` writes the float64 results (dense, row-major) computed from host copies
        of the operands. `baseline(operand_addresses, result_addresses, stream)`, if given, computes
        the call from the verifier's own input buffers (host memory, or the CUDA device's with
        `stream` a cudaStream_t): with `result_addresses` (the verifier's result buffers) it writes
        the results there, the verifying call, once; with `result_addresses` None it is a timed run
        and computes into memory of its own, writing nothing of the verifier's (a copy into its
        buffers is not the baseline's work). Timed interleaved with the kernel by the engine,
        reported as report["baselines"][baseline_name]. All raise on failure.
        -> (return code, response document)."""
        fill_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
        reference_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(ctypes.c_void_p))
        baseline_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)

        class FactBaseline(ctypes.Structure):
            _fields_ = [("name", ctypes.c_char_p), ("call", baseline_type), ("user", ctypes.c_void_p)]

        function = self._function("fact_verify_call", ctypes.c_int,
                                  [ctypes.c_char_p, ctypes.c_void_p, fill_type, reference_type,
                                   ctypes.POINTER(FactBaseline), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)])
        free = self._function("fact_engine_free", None, [ctypes.c_void_p])
        operands = len(request["call"]["operands"])
        results = len(request["call"]["results"])
        errors: list[str] = []

        def on_fill(_user, index, pointers):
            try:
                fill(int(index), [pointers[i] for i in range(operands)])
                return 0
            except Exception as error:  # noqa: BLE001 - reported through the engine's answer
                errors.append(f"fill: {type(error).__name__}: {error}")
                return 1

        def on_reference(_user, operand_pointers, result_pointers):
            try:
                reference([operand_pointers[i] for i in range(operands)], [result_pointers[i] for i in range(results)])
                return 0
            except Exception as error:  # noqa: BLE001
                errors.append(f"reference: {type(error).__name__}: {error}")
                return 1

        def on_baseline(_user, operand_pointers, result_pointers, stream):
            try:
                baseline([operand_pointers[i] for i in range(operands)],
                         [result_pointers[i] for i in range(results)] if result_pointers else None, stream or 0)
                return 0
            except Exception as error:  # noqa: BLE001
                message = f"baseline: {type(error).__name__}: {error}"
                if message not in errors:
                    errors.append(message)
                return 1

        fill_function, reference_function = fill_type(on_fill), reference_type(on_reference)
        named = None
        if baseline is not None:
            baseline_function = baseline_type(on_baseline)  # kept alive until the call returns
            named = FactBaseline(baseline_name.encode(), baseline_function, None)
        response = ctypes.c_void_p()
        code = int(function(json.dumps(request).encode(), entry_address, fill_function, reference_function,
                            ctypes.byref(named) if named is not None else None, None, ctypes.byref(response)))
        if not response.value:
            return code, {"status": "error", "error": f"fact_verify_call returned {code} and no response"}
        try:
            text = ctypes.string_at(response.value).decode(errors="replace")
        finally:
            free(response)
        document = json.loads(text)
        if errors:
            document["callback_errors"] = errors
        return code, document


class ReferenceLibrary:
    """`fact_reference_call` of a library (the engine's, or $FACT_REFERENCE_LIBRARY)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            dll = ctypes.CDLL(str(self.path))
        except OSError as error:
            raise EngineNotFound(f"cannot load the reference library {self.path}: {error}") from error
        try:
            self._call = dll.fact_reference_call
        except AttributeError:
            raise EngineNotFound(f"{self.path} does not export fact_reference_call") from None
        self._call.restype = ctypes.c_int
        self._call.argtypes = [ctypes.c_void_p]

    def call(self, image_address: int) -> int:
        """fact_reference_call on the argument image at `image_address`; the FactStatus."""
        return int(self._call(image_address))


_lock = threading.Lock()
_engines: dict[str, EngineLibrary] = {}
_references: dict[str, ReferenceLibrary] = {}


def engine_library() -> EngineLibrary:
    """The engine library, loaded once per path; raises EngineNotFound."""
    path = engine_library_path()
    with _lock:
        if str(path) not in _engines:
            _engines[str(path)] = EngineLibrary(path)
        return _engines[str(path)]


def reference_library_path() -> Path:
    """$FACT_REFERENCE_LIBRARY, else the engine library; raises EngineNotFound."""
    explicit = os.environ.get("FACT_REFERENCE_LIBRARY")
    if explicit:
        if not Path(explicit).is_file():
            raise EngineNotFound(f"$FACT_REFERENCE_LIBRARY={explicit} does not exist")
        return Path(explicit)
    return engine_library_path()


def reference_library() -> ReferenceLibrary:
    """The library whose fact_reference_call runs fact::launch on CPU tensors (looked up on
    every call, loaded once per path); raises EngineNotFound."""
    path = reference_library_path()
    with _lock:
        if str(path) not in _references:
            _references[str(path)] = ReferenceLibrary(path)
        return _references[str(path)]
