"""Declared dynamic ranges (docs/dynamic_shapes.md, "What the user declares"): the one parser
of the range spec and of the per-input dimension names, and their translation to
torch.export's `dynamic_shapes`.

    parse_ranges("batch=1..256,seq=16..4096:8@512/1024") -> [Range, ...]
    parse_dims(["x:batch,seq,_", "mask:batch,_,_,seq"])   -> {"x": ["batch", "seq", None], ...}
    dynamic_shapes_from_spec(spec, dims, module, inputs)  -> a tuple (one {dim: Range} per input)
    export_dynamic_shapes(dynamic_shapes, module, inputs) -> (torch.export's dynamic_shapes,
                                                              the declared (input, dim) -> Range)

A `Range` is what torch.export's `Dim` is, plus the FACT-only `multiple` and `typical` sizes;
`fact.optimize(dynamic_shapes=...)` takes either in torch.export's structure (a {dim index: Dim
or Range} per input, in a tuple/list by position or a dict by forward parameter name). Errors
are ValueError naming what is wrong.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_RANGE = re.compile(r"^\s*(?P<name>[^=\s]+)\s*=\s*(?P<min>\d+)\s*\.\.\s*(?P<max>\d+)\s*"
                    r"(?::\s*(?P<multiple>\d+)\s*)?(?:@\s*(?P<typical>[\d\s/]+))?$")


@dataclass(frozen=True)
class Range:
    """A declared dynamic dimension: sizes min..max that are multiples of `multiple`; the
    `typical` sizes get their own bucket."""
    name: str
    min: int
    max: int
    multiple: int = 1
    typical: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name) or self.name == "_":
            raise ValueError(f"dynamic dimension name '{self.name}' is not an identifier")
        if self.min < 1:
            raise ValueError(f"{self.name}: the minimum {self.min} is below 1")
        if self.max < self.min:
            raise ValueError(f"{self.name}: the range {self.min}..{self.max} is empty")
        if self.multiple < 1:
            raise ValueError(f"{self.name}: the multiple {self.multiple} is below 1")
        if self.max // self.multiple * self.multiple < self.min:
            raise ValueError(f"{self.name}: no multiple of {self.multiple} lies in {self.min}..{self.max}")
        for size in self.typical:
            if not self.allows(size):
                raise ValueError(f"{self.name}: the typical size {size} is not {self.describe_allowed()}")

    def allows(self, size: int) -> bool:
        return self.min <= size <= self.max and size % self.multiple == 0

    def describe_allowed(self) -> str:
        return f"in {self.min}..{self.max}" + (f" and a multiple of {self.multiple}" if self.multiple > 1 else "")

    def spec(self) -> str:
        """The range in the spec's spelling."""
        text = f"{self.name}={self.min}..{self.max}"
        if self.multiple > 1:
            text += f":{self.multiple}"
        if self.typical:
            text += "@" + "/".join(str(t) for t in self.typical)
        return text

    def export_dim(self) -> Any:
        return torch.export.Dim(self.name, min=self.min, max=self.max)


def parse_ranges(text: str) -> list[Range]:
    """`NAME=MIN..MAX[:MULTIPLE][@T1/T2...]`, comma-separated; ValueError for a malformed or
    repeated range."""
    ranges: list[Range] = []
    for part in str(text).split(","):
        if not part.strip():
            raise ValueError(f"--dynamic '{text}': an empty range (expected NAME=MIN..MAX[:MULTIPLE][@T1/T2])")
        match = _RANGE.match(part)
        if not match:
            raise ValueError(f"--dynamic: '{part.strip()}' is not NAME=MIN..MAX[:MULTIPLE][@T1/T2] "
                             f"(e.g. batch=1..256 or seq=16..4096:8@512/1024)")
        typical = match["typical"]
        sizes = tuple(int(t) for t in typical.split("/")) if typical is not None else ()
        if typical is not None and (not typical.strip() or any(not t.strip() for t in typical.split("/"))):
            raise ValueError(f"--dynamic: '{part.strip()}': typical sizes are @T1/T2/...")
        if any(r.name == match["name"] for r in ranges):
            raise ValueError(f"--dynamic: '{match['name']}' is declared twice")
        ranges.append(Range(match["name"], int(match["min"]), int(match["max"]),
                            int(match["multiple"] or 1), sizes))
    return ranges


def parse_dims(items: Sequence[str] | None) -> dict[str, list]:
    """`INPUT:DIM,DIM,...` per item (`_`: static) -> {INPUT: [name or None per dim]}."""
    dims: dict[str, list] = {}
    for item in items or []:
        input_name, colon, names = str(item).partition(":")
        input_name = input_name.strip()
        if not colon or not input_name or not names.strip():
            raise ValueError(f"--dims '{item}' is not INPUT:DIM,DIM,... (e.g. x:batch,seq,_)")
        if input_name in dims:
            raise ValueError(f"--dims: input '{input_name}' is named twice")
        entries = [n.strip() for n in names.split(",")]
        for name in entries:
            if name != "_" and not _NAME.match(name):
                raise ValueError(f"--dims '{item}': '{name}' is neither a dimension name nor _")
        dims[input_name] = [None if n == "_" else n for n in entries]
    return dims


def forward_parameter_names(module: torch.nn.Module) -> list[str]:
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _input_index(key: Any, names: list[str], count: int, what: str) -> int:
    if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
        index = int(key)
    elif key in names:
        index = names.index(key)
    else:
        raise ValueError(f"{what}: '{key}' is not a forward parameter ({', '.join(names) or 'none'}) "
                         f"nor a 0-based position")
    if not 0 <= index < count:
        raise ValueError(f"{what}: input {key} does not exist (the module takes {count} inputs)")
    return index


def bind_ranges(spec: str | Sequence[Range], dims: Mapping[str, list] | Sequence[str] | str | None,
                inputs: Sequence[tuple[str, Sequence[int] | None]], *, dims_label: str = "--dims",
                dynamic_label: str = "--dynamic", dims_flag: str = "--dims") -> dict:
    """The one binding of declared ranges to input dimensions: {(input position, dim): Range}.
    `inputs`: (name, example sizes, or None for an input that is not a tensor) per position.
    `dims` names each input's dimensions (by name or 0-based position); without it, symbol i
    binds dimension i of every tensor input whose example size there equals the first tensor
    input's. The labels spell the front end's option names in the errors (ValueError)."""
    ranges = parse_ranges(spec) if isinstance(spec, str) else list(spec)
    by_name = {r.name: r for r in ranges}
    if isinstance(dims, str):
        dims = [dims]
    if isinstance(dims, (list, tuple)):
        dims = parse_dims(dims)
    bound: dict = {}
    if dims:
        names = [name for name, _ in inputs]
        for key, entries in dims.items():
            index = _input_index(key, names, len(inputs), f"{dims_label} {key}")
            shape = inputs[index][1]
            if shape is None:
                raise ValueError(f"{dims_label} {key}: input {index} is not a tensor")
            if len(entries) != len(shape):
                raise ValueError(f"{dims_label} {key}: {len(entries)} dimensions named, the input has "
                                 f"{len(shape)} (shape {list(shape)})")
            for dim, name in enumerate(entries):
                if name is None:
                    continue
                if name not in by_name:
                    raise ValueError(f"{dims_label} {key}: '{name}' is not a declared range "
                                     f"({', '.join(by_name) or 'none declared'})")
                bound[(index, dim)] = by_name[name]
    else:
        tensors = [(i, shape) for i, (_, shape) in enumerate(inputs) if shape is not None]
        if not tensors:
            raise ValueError(f"{dynamic_label}: the module takes no tensor inputs")
        first = tensors[0][1]
        if len(ranges) > len(first):
            raise ValueError(f"{dynamic_label} declares {len(ranges)} ranges but the first input has "
                             f"{len(first)} dimensions; name them with {dims_flag}")
        for index, shape in tensors:
            for dim, declared in enumerate(ranges):
                if dim < len(shape) and shape[dim] == first[dim]:
                    bound[(index, dim)] = declared
    unused = [name for name in by_name if name not in {r.name for r in bound.values()}]
    if unused:
        raise ValueError(f"{dynamic_label}: {', '.join(unused)} binds no input dimension")
    return bound


def dynamic_shapes_from_spec(spec: str | Sequence[Range], dims: Mapping[str, list] | Sequence[str] | None,
                             module: torch.nn.Module, example_inputs: Sequence[Any]) -> tuple:
    """The ranges bound to input dimensions (bind_ranges), as one {dim index: Range} per input
    (None for an input without dynamic dimensions)."""
    names = forward_parameter_names(module)
    inputs = [(names[i] if i < len(names) else str(i),
               list(x.shape) if isinstance(x, torch.Tensor) else None)
              for i, x in enumerate(example_inputs)]
    shapes: list[dict | None] = [None] * len(example_inputs)
    for (index, dim), declared in bind_ranges(spec, dims, inputs).items():
        shapes[index] = {**(shapes[index] or {}), dim: declared}
    return tuple(shapes)


def _as_range(value: Any, where: str) -> Range:
    if isinstance(value, Range):
        return value
    name = getattr(value, "__name__", None)
    if name is None or not hasattr(value, "min"):
        raise ValueError(f"dynamic_shapes {where}: {value!r} is neither a torch.export.Dim nor a "
                         f"fact Range")
    upper = getattr(value, "max", None)
    if not isinstance(upper, int) or upper >= 2 ** 62:
        raise ValueError(f"dynamic_shapes {where}: Dim '{name}' has no max; FACT plans a declared "
                         f"range (give Dim(..., max=N))")
    return Range(name, max(int(value.min), 1), upper)


def export_dynamic_shapes(dynamic_shapes: Any, module: torch.nn.Module,
                          example_inputs: Sequence[Any]) -> tuple[tuple, dict]:
    """torch.export's dynamic_shapes (a tuple by position, Dims only) and the declared dimensions
    {(input index, dim): Range}, from a tuple/list by position or a dict by forward parameter
    name of {dim: Dim or Range} (or None). Checks each example size against its range and that
    a name stands for one range."""
    count = len(example_inputs)
    if isinstance(dynamic_shapes, Mapping):
        names = forward_parameter_names(module)
        per_input: list = [None] * count
        for key, value in dynamic_shapes.items():
            per_input[_input_index(key, names, count, "dynamic_shapes")] = value
    elif isinstance(dynamic_shapes, (list, tuple)):
        if len(dynamic_shapes) != count:
            raise ValueError(f"dynamic_shapes has {len(dynamic_shapes)} entries for {count} inputs")
        per_input = list(dynamic_shapes)
    else:
        raise ValueError("dynamic_shapes must be a tuple/list (by position) or a dict (by forward "
                         "parameter name) of {dim index: Dim}")
    declared: dict[tuple, Range] = {}
    by_name: dict[str, Range] = {}
    dims: dict[str, Any] = {}
    export_shapes = []
    for index, entry in enumerate(per_input):
        if entry is None:
            export_shapes.append(None)
            continue
        tensor = example_inputs[index]
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"dynamic_shapes: input {index} is not a tensor")
        if isinstance(entry, (list, tuple)):
            entry = {dim: value for dim, value in enumerate(entry) if value is not None}
        if not isinstance(entry, Mapping):
            raise ValueError(f"dynamic_shapes: input {index}'s entry is not a {{dim: Dim}} mapping")
        shape = {}
        for dim, value in entry.items():
            if not isinstance(dim, int) or not -tensor.dim() <= dim < tensor.dim():
                raise ValueError(f"dynamic_shapes: input {index} has no dimension {dim} (shape "
                                 f"{list(tensor.shape)})")
            dim %= tensor.dim()
            declared_range = _as_range(value, f"input {index} dim {dim}")
            seen = by_name.setdefault(declared_range.name, declared_range)
            if seen != declared_range:
                raise ValueError(f"dynamic_shapes: '{declared_range.name}' is declared as "
                                 f"{seen.spec()} and as {declared_range.spec()}")
            size = int(tensor.shape[dim])
            if not seen.allows(size):
                raise ValueError(f"{seen.name}: the example size {size} (input {index} dim {dim}) is "
                                 f"not {seen.describe_allowed()}")
            declared[(index, dim)] = seen
            shape[dim] = dims.setdefault(seen.name, seen.export_dim())
        export_shapes.append(shape or None)
    for name in by_name:
        sizes = {int(example_inputs[i].shape[d]) for (i, d), r in declared.items() if r.name == name}
        if len(sizes) > 1:
            raise ValueError(f"{name}: the example inputs give it different sizes {sorted(sizes)}")
    return tuple(export_shapes), declared
