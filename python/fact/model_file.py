"""Model files in KernelBench style: a module class plus get_inputs() and get_init_inputs()."""
from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from fact.graph_writer import CaptureError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "float64": torch.float64}


def dtype_spellings() -> dict[str, str]:
    """Every spelling a command line takes for DTYPES ("bf16", "half", ...) -> its name, read
    from the engine's one dtype table (`fact optimize --dtype` takes the same)."""
    from fact import engine_tables
    return {spelling: name for spelling, name in engine_tables.dtype_names().items() if name in DTYPES}


def load_model_file(spec: str) -> tuple[Any, str]:
    """Imports `path/to/model.py:ClassName`; returns (python module, class name). Raises
    CaptureError when the file, the class or get_inputs() is missing or the import fails."""
    file_part, sep, class_name = spec.rpartition(":")
    if not sep or not file_part or not class_name:
        raise CaptureError(f"expected path/to/model.py:ClassName, got '{spec}'")
    path = Path(file_part)
    if not path.is_file():
        raise CaptureError(f"model file {path} does not exist")
    module_name = f"fact_model_{path.stem}"
    import_spec = importlib.util.spec_from_file_location(module_name, path)
    if import_spec is None or import_spec.loader is None:
        raise CaptureError(f"model file {path} cannot be imported")
    py_module = importlib.util.module_from_spec(import_spec)
    sys.modules[module_name] = py_module
    try:
        import_spec.loader.exec_module(py_module)
    except Exception as error:
        del sys.modules[module_name]
        raise CaptureError(f"model file {path} failed to import{where_raised(error)}: "
                           f"{type(error).__name__}: {error}") from error
    cls = getattr(py_module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        defined = module_classes(py_module)
        close = difflib.get_close_matches(class_name, defined, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        listed = (f" (it defines {', '.join(defined)}{hint})" if defined
                  else " (it defines no torch.nn.Module class)")
        raise CaptureError(f"model file {path} defines no torch.nn.Module class {class_name}{listed}")
    if not callable(getattr(py_module, "get_inputs", None)):
        raise CaptureError(f"model file {path} defines no get_inputs()")
    return py_module, class_name


def module_classes(py_module: Any) -> list[str]:
    """Names of the torch.nn.Module classes a model file defines itself (not those it imports)."""
    return sorted(name for name, value in vars(py_module).items()
                  if isinstance(value, type) and issubclass(value, torch.nn.Module)
                  and value.__module__ == py_module.__name__)


def where_raised(error: BaseException) -> str:
    """" at FILE:LINE in FUNCTION" of the innermost frame of `error`'s traceback that is not in
    torch or in FACT (the user's own line), or "" when there is none."""
    frames = traceback.extract_tb(error.__traceback__)
    package = str(Path(__file__).resolve().parent)
    torch_root = str(Path(torch.__file__).resolve().parent)
    for frame in reversed(frames):
        filename = str(Path(frame.filename).resolve()) if frame.filename else ""
        if filename.startswith((package, torch_root)) or frame.filename.startswith("<"):
            continue
        return f" at {frame.filename}:{frame.lineno} in {frame.name}"
    return ""


def _convert(x: Any, dtype: torch.dtype | None, device: str | None) -> Any:
    if isinstance(x, torch.Tensor):
        kwargs = {}
        if device is not None:
            kwargs["device"] = device
        if dtype is not None and x.is_floating_point():
            kwargs["dtype"] = dtype
        return x.to(**kwargs) if kwargs else x
    return x


def _call_get_inputs(get_inputs: Any, dtype: torch.dtype | None, device: str | None) -> list:
    """get_inputs(), passing dtype= / device= where its signature takes them."""
    try:
        parameters = inspect.signature(get_inputs).parameters
    except (TypeError, ValueError):
        parameters = {}
    kwargs = {}
    if dtype is not None and "dtype" in parameters:
        kwargs["dtype"] = dtype
    if device is not None and "device" in parameters:
        kwargs["device"] = device
    return list(get_inputs(**kwargs))


def build_from_model_file(spec: str, dtype: str | None = None, device: str | None = None
                          ) -> tuple[torch.nn.Module, tuple]:
    """Builds the model file's module (with get_init_inputs(), if defined) and its example
    inputs (get_inputs()), in `dtype` (floating tensors only) on `device`. The module is
    constructed on the device directly, so on 'meta' it takes no weight memory."""
    py_module, class_name = load_model_file(spec)
    dtype = dtype_spellings().get(dtype, dtype) if dtype is not None else None
    if dtype is not None and dtype not in DTYPES:
        raise CaptureError(f"unsupported dtype '{dtype}' (choose from {', '.join(sorted(DTYPES))})")
    torch_dtype = DTYPES[dtype] if dtype is not None else None
    get_init_inputs = getattr(py_module, "get_init_inputs", None)
    init_inputs = list(get_init_inputs()) if callable(get_init_inputs) else []
    with torch.device(device) if device is not None else contextlib.nullcontext():
        model = getattr(py_module, class_name)(*init_inputs)
        inputs = _call_get_inputs(py_module.get_inputs, torch_dtype, device)
    if device is not None or torch_dtype is not None:
        model = model.to(device=device, dtype=torch_dtype)
    inputs = tuple(_convert(x, torch_dtype, device) for x in inputs)
    return model.eval(), inputs
