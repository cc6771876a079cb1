"""What the CPU run and the GPU benchmark share: the corpus files (finding, importing, their
DTYPES), building a model and its inputs from a fixed seed, the precisions and output bounds,
the float64 reference and the error against it, and the small file and logging helpers."""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import logging
import math
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import torch


# python/fact/conformance/corpus.py -> the repository
REPO_ROOT = Path(__file__).resolve().parents[3]
CORPUS_DIR = REPO_ROOT / "corpus"
CATEGORIES = ("gemm", "epilogue", "mlp", "attention", "hf", "misc")
DTYPE_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# PRECISION_BY_DTYPE (the mode each corpus dtype runs in) and OUTPUT_BOUND (below) are read from
# the engine's tables (fact_engine_tables) when first used: see __getattr__ at the end.


def case_record(stem: str, dtype_name: str, status: str = "ok", reason: str = "", **fields) -> dict:
    """The start of every GPU case record ("<stem>-<dtype>"): its name, model, dtype, precision
    mode, status and reason, then `fields`; the measured, failed and skipped records all start so."""
    return {"name": f"{stem}-{dtype_name}", "model": stem, "dtype": dtype_name,
            "precision": precision_by_dtype()[dtype_name], "status": status, "reason": reason, **fields}


# The bound FACT's output error must meet, ‖fact − ref64‖ / ‖ref64‖ with ref64 the original
# module run in float64 on the same weights and inputs. The precision contract (docs/):
# `strict` is "as accurate as the framework's own float32 path": PyTorch's float32 error on the
# corpus at CPU_TEST_SIZES is at most 3.4e-7, so 1e-5 keeps a margin of ~30x and still fails any
# TF32- or bf16-sized error (1e-4 .. 1e-3). `native` runs the model's dtype with wide
# accumulation: one bf16 rounding is 2^-9 ~ 2e-3 relative, PyTorch's own bf16 error on the corpus
# is at most 4.5e-3 and FACT's the same (it rounds where PyTorch does), so 2e-2 leaves 4x while a
# wrong operand, epilogue step or layout is off by O(1). Where PyTorch's own error is larger than
# the bound (no corpus model at the committed sizes), 1.5x PyTorch's error is the bound instead.
# These bounds are the engine's tolerances (include/fact/core/precision.hpp): strict for a
# float32 output, native for a bf16 output.
TORCH_ERROR_FACTOR = 1.5


def _first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return (text.splitlines() or [text])[0][:500]


# --------------------------------------------------------------------------------------------
# Corpus files


def corpus_files(directory: Path = CORPUS_DIR) -> list[Path]:
    """The model files: <category>_*.py in the corpus folder, sorted."""
    return sorted(p for p in Path(directory).glob("*.py") if p.name.split("_", 1)[0] in CATEGORIES)


def load_file(path: Path) -> ModuleType:
    """Imports a corpus file by path as a fresh module (sizes can be changed without touching
    other loads)."""
    name = f"fact_conformance_{Path(path).stem}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def load_at_cpu_sizes(path: Path) -> ModuleType:
    """load_file with the file's CPU_TEST_SIZES assigned to its constants (pattern tests that
    build a corpus model themselves)."""
    module = load_file(path)
    for key, value in getattr(module, "CPU_TEST_SIZES", {}).items():
        setattr(module, key, value)
    return module


def file_dtypes(module: ModuleType | Path) -> tuple[str, ...]:
    """The file's DTYPES (a module, or a path to import; a file that does not import gets
    both, so that its rows record the failure instead of vanishing)."""
    if not isinstance(module, ModuleType):
        try:
            module = load_file(module)
        except Exception:  # noqa: BLE001 - reported where the case runs
            return ("float32", "bfloat16")
    return tuple(getattr(module, "DTYPES", ("float32", "bfloat16")))


def _call_get_inputs(module: ModuleType, dtype: torch.dtype, device: str) -> list:
    parameters = inspect.signature(module.get_inputs).parameters
    kwargs = {}
    if "dtype" in parameters:
        kwargs["dtype"] = dtype
    if "device" in parameters:
        kwargs["device"] = device
    out = []
    for x in module.get_inputs(**kwargs):
        if isinstance(x, torch.Tensor):
            x = x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype)
        out.append(x)
    return out


def build(module: ModuleType, dtype_name: str, device: str = "cpu", seed: int = 0,
          sizes: dict | None = None) -> tuple[torch.nn.Module, tuple]:
    """The model (eval mode, in dtype, on device) and its inputs from a fixed seed: built in
    float32 and cast (every dtype gets the same weights), never deep-copied (a forward closing
    over submodules would keep calling the original's). `sizes` are assigned to the module's
    constants first (e.g. CPU_TEST_SIZES)."""
    for key, value in (sizes or {}).items():
        setattr(module, key, value)
    dtype = DTYPE_BY_NAME[dtype_name]
    torch.manual_seed(seed)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs())
    model = model.to(device=device, dtype=dtype).eval()
    torch.manual_seed(seed + 1)
    inputs = _call_get_inputs(module, torch.float32, device)
    inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in inputs]
    return model, tuple(inputs)


def build_case(path: Path, dtype_name: str, device: str, sizes: str = "full",
               seed: int = 0) -> tuple[ModuleType, torch.nn.Module, tuple]:
    """One case's file imported afresh, its model and inputs (build): sizes "full" keeps the
    file's constants, "cpu" assigns its CPU_TEST_SIZES. The GPU measurement and the prepare
    phase both build through here, so that the graphs prepare compiles are the ones measured."""
    module = load_file(path)
    model, inputs = build(module, dtype_name, device, seed,
                          getattr(module, "CPU_TEST_SIZES", {}) if sizes == "cpu" else None)
    return module, model, inputs


# --------------------------------------------------------------------------------------------
# Checking an output against float64


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (inf when out is not finite)."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    if not torch.isfinite(out64).all():
        return math.inf
    denominator = torch.linalg.vector_norm(ref64.flatten()).item()
    difference = torch.linalg.vector_norm((out64 - ref64).flatten()).item()
    return difference / denominator if denominator > 0 else difference


def output_bound(precision: str, torch_error: float | None) -> float:
    """The bound FACT's output error must meet (see OUTPUT_BOUND)."""
    bounds = output_bounds()
    bound = bounds.get(precision, bounds["native"])
    if torch_error is not None and math.isfinite(torch_error):
        bound = max(bound, TORCH_ERROR_FACTOR * torch_error)
    return bound


def float64_output(model: torch.nn.Module, inputs: Sequence[Any]) -> torch.Tensor:
    """The module run in float64 on the inputs (floating ones converted), its parameters and
    buffers converted in place and restored (fact.measure.float64_in_place)."""
    from fact.measure import float64_in_place

    wide = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in inputs)
    with torch.no_grad(), float64_in_place(model):
        return model(*wide)


def _single_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    raise TypeError(f"forward returned {type(out).__name__}, not one tensor")


@contextlib.contextmanager
def quiet_torch():
    """Keeps torch's export/dynamo chatter (graph dumps of failed exports, guard errors,
    warnings) out of the output: every failure ends up in a report instead."""
    names = ("torch.fx.experimental.symbolic_shapes", "torch._guards", "torch._dynamo",
             "torch.export", "torch._export")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        for name in names:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


# --------------------------------------------------------------------------------------------
# Files


def load_json(path: Path) -> dict | None:
    """The JSON document in the file, or None when there is none (or it does not parse)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)


def precision_by_dtype() -> dict[str, str]:
    """Corpus dtype -> the precision mode it runs in, from the engine's tables."""
    from fact import engine_tables
    return {dtype: engine_tables.default_precision(dtype) for dtype in DTYPE_BY_NAME}


def output_bounds() -> dict[str, float]:
    """Precision mode -> the bound on FACT's output error: the engine's tolerance for a float32
    output (strict) and a bf16 output (native)."""
    from fact import engine_tables
    return {"strict": engine_tables.tolerance("strict", "float32"),
            "native": engine_tables.tolerance("native", "bfloat16")}


def __getattr__(name: str):
    """PRECISION_BY_DTYPE and OUTPUT_BOUND, read from the engine's tables when first asked for
    (python/fact/engine_tables.py), so no number or mode name is repeated here."""
    if name == "PRECISION_BY_DTYPE":
        return precision_by_dtype()
    if name == "OUTPUT_BOUND":
        return output_bounds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
