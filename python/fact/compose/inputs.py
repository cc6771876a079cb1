"""The example inputs and pattern selections as the plan spells them, the one `torch.export`
of a module (quiet: its shape-solver chatter and warnings are dropped), and real example
tensors for traced ones (`example_tensor`)."""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any, Iterable, Sequence

import torch

from fact import module_state


def _normalize_inputs(example_inputs: Sequence[Any] | Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor) or not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    return tuple(example_inputs)


def example_tensor(shape: Sequence[int], stride: Sequence[int], dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor:
    """A real tensor of that layout, outside any fake mode: normal values for floating dtypes,
    zeros otherwise (planning reads the layout; verification draws its own values)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        tensor = torch.empty_strided(list(shape), list(stride), dtype=dtype, device=device)
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            tensor.normal_()
        else:
            tensor.zero_()
    return tensor


def _device_of(example_inputs: tuple) -> torch.device:
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return tensors[0].device if tensors else torch.device("cpu")


def _input_specs(example_inputs: tuple) -> list[dict]:
    return [{"shape": list(x.shape), "dtype": str(x.dtype)} if isinstance(x, torch.Tensor)
            else {"value": repr(x)} for x in example_inputs]


def _normalize_patterns(patterns: Iterable[str] | str | None) -> list[str] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        return [patterns]
    return sorted(set(patterns))


def _selected(replacement: dict, patterns: list[str] | None) -> bool:
    return (patterns is None or replacement.get("rule") in patterns
            or replacement.get("pattern") in patterns)


def _export(module: torch.nn.Module, example_inputs: tuple,
            dynamic_shapes: Any = None) -> torch.export.ExportedProgram:
    """torch.export (non-strict) of the module; `dynamic_shapes` in torch.export's structure,
    with Dim or fact.dynamic_ranges.Range values."""
    shapes_logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    shapes_level = shapes_logger.level
    if dynamic_shapes is not None:
        from fact.dynamic_ranges import export_dynamic_shapes
        dynamic_shapes = export_dynamic_shapes(dynamic_shapes, module, example_inputs)[0]
    try:
        shapes_logger.setLevel(logging.ERROR)
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return module_state.export_keeping_state(module, example_inputs, dynamic_shapes=dynamic_shapes,
                                                     strict=False)[0]
    finally:
        shapes_logger.setLevel(shapes_level)
