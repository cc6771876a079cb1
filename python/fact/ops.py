"""`fact::launch`: the one custom op every composed replacement calls, whatever its kind.

    fact::launch(Tensor[] operands, int call, SymInt[] sizes=[]) -> Tensor[]
    fact::launch_out(Tensor[] operands, Tensor(a!)[] results, int call, SymInt[] sizes=[]) -> ()

A call is registered once from a plan call (docs/plan.md) with `register_call(call, library)`,
which returns the integer the graph carries. What a call holds: its argument image (the kind's
ABI struct as bytes, every address zero), its pointer slots (where the address of an operand
or a result goes, with an element offset), its results (shape, stride, dtype), its operands'
dtypes (and layouts when the plan gives them), and its kernel library and entry. The op
allocates the results (`launch`) or takes them (`launch_out`), copies the image, writes each
slot's address (`data_ptr + element_offset * element_size`) and hands the image over. It never
looks inside the image: no kind, epilogue, layout or limit is known here.

A call planned over declared symbols (docs/dynamic_shapes.md) is registered with the plan's
`symbols=`: its shapes, strides, element offsets and patched image fields are polynomials over
the symbols (fact.symbolic_sizes), and it has one kernel and image per bucket tuple. `sizes`
are the symbols' values, in the plan's order: the op picks the bucket (per symbol the first
edge >= size), copies its image, writes each patch's value (4 or 8 bytes, little-endian) and
the addresses, and allocates the results with their polynomial shapes and strides. A static
call takes no sizes and behaves as before.

Implementations (per dispatch key; none knows a kind):
- CPU: `fact_reference_call` (the engine library's host float64 reference of every kind, or
  $FACT_REFERENCE_LIBRARY's) on host memory; a non-zero FactStatus raises with its name. A call
  registered with a library built for the host (fact_kernel_info's "device" is "host": the
  kernels agents write for the CPU path, docs/agent.md) runs that library's entry on host
  memory instead.
- CUDA, native: src/torch_ext/fact_launch_op.cpp (fact.native): a registry of calls mirrored
  from this one (same numbering), the kernel library dlopened once, results and workspace from
  the caching allocator, the workspace size queried once per call, launch on the current
  stream, no synchronization (CUDA-graph capture safe). Installed with the first call that
  names a kernel library on a machine with a GPU.
- CUDA, Python: the same through ctypes (fact.kernels), when the native one cannot be built
  (fact.native.reason() says why).
- Meta (fake): allocates the results only, so the op traces under torch.compile / torch.export;
  for a symbolic call their shapes are the polynomials of the SymInt sizes.
- Autograd: none. A composed module that trains never differentiates the op: AOTAutograd
  composes its forward and its backward graph separately (fact.compose.training). A result
  computed from tensors that require grad in a graph composed for inference raises on
  backward, saying how to get a module that trains.
`describe_implementation(device_type)` says which implementation runs.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import struct
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from fact import _engine, abi, kernels, native
from fact.symbolic_sizes import BucketTable, Poly, evaluate, parse_size


@dataclass(frozen=True)
class PointerSlot:
    offset: int           # byte offset of the 64-bit address in the image
    from_result: bool     # the address of a result (else of an operand)
    index: int            # which operand / result
    element_offset: Any   # elements added to the tensor's data pointer (int, or Poly)


@dataclass(frozen=True)
class Patch:
    """An integer field of a symbolic call's image written per launch: `bytes` (4 or 8)
    little-endian at `offset`, the value of `poly` at the launch's sizes."""
    offset: int
    bytes: int
    poly: Poly


@dataclass(frozen=True)
class Bucket:
    """A bucket tuple's kernel: its image (before patches and addresses) and library."""
    image: bytes
    library: Optional[str]
    entry: Optional[str]


@dataclass(frozen=True)
class TensorSpec:
    dtype: torch.dtype
    shape: Optional[tuple] = None   # None: not checked (operands without a layout in the plan)
    stride: Optional[tuple] = None  # entries: ints, or Polys for a symbolic call
    # A result's "alloc_shape" (docs/plan.md): allocated as a dense tensor of this shape, the
    # result is its {shape, stride} view at offset 0 (a GEMM's D with padded rows); None: the
    # result is allocated as itself. allocate_result is the one place that reads it.
    alloc_shape: Optional[tuple] = None


def result_spec(result: Sequence) -> TensorSpec:
    """The TensorSpec of a result as the checks carry it: (value id, shape, stride, dtype) and,
    for a result with padded rows, its alloc_shape fifth (None or absent: allocated as itself)."""
    alloc = result[4] if len(result) > 4 else None
    return TensorSpec(result[3], tuple(result[1]), tuple(result[2]),
                      tuple(alloc) if alloc is not None else None)


def storage_elements(spec: TensorSpec) -> int:
    """Elements a result's storage holds: its allocation's, or the span of its view."""
    if spec.alloc_shape is not None:
        return math.prod(spec.alloc_shape)
    if any(size == 0 for size in spec.shape):
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(spec.shape, spec.stride))


def allocate_result(spec: TensorSpec, device: torch.device | str) -> torch.Tensor:
    """A result as the plan allocates it (every implementation of fact::launch, the fake one,
    verification and timing call this): `empty_strided(shape, stride)`, or with `alloc_shape`
    a tensor of the result's shape and strides over the storage of a dense `alloc_shape`
    tensor: the kernel writes the whole allocation (padded rows included), the value is the
    view. Not a view of another tensor (set_ on a fresh one): the op's outputs alias nothing."""
    if spec.alloc_shape is None:
        return torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=device)
    storage = torch.empty(spec.alloc_shape, dtype=spec.dtype, device=device).untyped_storage()
    return torch.empty(0, dtype=spec.dtype, device=device).set_(storage, 0, spec.shape, spec.stride)


@dataclass
class Call:
    """A registered call (one `call` of a plan)."""
    id: int
    label: str
    kind: str
    image: bytes
    slots: tuple
    results: tuple            # TensorSpec (shape and stride always set)
    operands: tuple           # TensorSpec
    library: Optional[str]    # kernel library path (CUDA); None: host reference only
    entry: Optional[str]
    _workspace: Optional[int] = field(default=None, repr=False)
    host: bool = False        # the library runs on the CPU (fact_kernel_info "device": "host")
    # A symbolic call: the bucket table over the plan's symbols, the patched fields, and one
    # Bucket per bucket tuple (row-major); None / empty for a static call.
    table: Optional[BucketTable] = None
    patches: tuple = ()
    buckets: tuple = ()
    _bound: dict = field(default_factory=dict, repr=False)  # sizes -> the call at those sizes

    @property
    def symbolic(self) -> bool:
        return self.table is not None

    def describe(self) -> str:
        return f"fact::launch call {self.id}" + (f" ({self.label})" if self.label else "")


def parse_dtype(name: str) -> torch.dtype:
    """"torch.bfloat16" (or "bfloat16") -> torch.bfloat16; ValueError otherwise."""
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{name}'")
    return dtype


def _parse_call(call: dict, library: Optional[str], entry: Optional[str],
                symbols: Optional[Sequence[dict]] = None,
                bucket_libraries: Optional[Sequence[tuple]] = None) -> Call:
    """The plan call's executable part, checked for consistency (ValueError with the reason).
    `symbols`: the plan's symbols when the plan has any (their order is the polynomials' and
    the sizes'); `bucket_libraries`: (library, entry) per entry of the call's "buckets"."""
    label = str(call.get("label", ""))
    args = call.get("args")
    if not isinstance(args, dict):
        raise ValueError("the call has no \"args\" (argument image)")
    image = _image_of(args.get("hex", ""), "args.hex")
    size = int(args.get("size", len(image)))
    if len(image) != size:
        raise ValueError(f"args.hex holds {len(image)} bytes, args.size says {size}")
    if size < abi.HEADER_SIZE:
        raise ValueError(f"the argument image ({size} bytes) is shorter than FactCallHeader")
    version, _, header_size, _ = abi.read_header(image)
    if version != abi.FACT_ABI_VERSION:
        raise ValueError(f"the argument image is for kernel ABI version {version}; this FACT "
                         f"runs version {abi.FACT_ABI_VERSION}")
    if header_size != size:
        raise ValueError(f"the argument image's header gives size {header_size}, the plan {size}")
    count = len(symbols or [])

    def sizes_of(entries, what):
        return tuple(parse_size(v, count, what) for v in entries)

    operands = []
    for index, operand in enumerate(call.get("operands", [])):
        shape, stride = operand.get("shape"), operand.get("stride")
        if (shape is None) != (stride is None):
            raise ValueError(f"operand {index}: shape and stride go together")
        operands.append(TensorSpec(parse_dtype(operand.get("dtype", "")),
                                   sizes_of(shape, f"operand {index} shape") if shape is not None else None,
                                   sizes_of(stride, f"operand {index} stride") if stride is not None else None))
    results = []
    for index, result in enumerate(call.get("results", [])):
        shape = sizes_of(result.get("shape", []), f"result {index} shape")
        stride = sizes_of(result.get("stride", []), f"result {index} stride")
        if len(shape) != len(stride):
            raise ValueError(f"result {index}: shape {list(shape)} and stride {list(stride)} differ in rank")
        alloc = result.get("alloc_shape")
        if alloc is not None:
            if count:
                raise ValueError(f"result {index}: a call over symbols has no alloc_shape")
            alloc = tuple(int(v) for v in alloc)
            if any(v < 0 for v in alloc) or any(v < 0 for v in stride):
                raise ValueError(f"result {index}: negative alloc_shape {list(alloc)} or stride")
        spec = TensorSpec(parse_dtype(result.get("dtype", "")), shape, stride, alloc)
        if alloc is not None and storage_elements(TensorSpec(spec.dtype, shape, stride)) > math.prod(alloc):
            raise ValueError(f"result {index}: shape {list(shape)} stride {list(stride)} reaches "
                             f"past its alloc_shape {list(alloc)}")
        results.append(spec)
    slots = []
    for pointer in args.get("pointers", []):
        offset, index = int(pointer["offset"]), int(pointer["index"])
        source = pointer.get("from")
        if source not in ("operand", "result"):
            raise ValueError(f"pointer at offset {offset}: \"from\" is '{source}', not operand "
                             f"or result")
        available = len(results) if source == "result" else len(operands)
        if not 0 <= index < available:
            raise ValueError(f"pointer at offset {offset}: {source} {index} does not exist "
                             f"(the call has {available})")
        if offset < abi.HEADER_SIZE or offset + abi.POINTER_SIZE > size:
            raise ValueError(f"pointer at offset {offset} lies outside the image's arguments "
                             f"({abi.HEADER_SIZE}..{size})")
        slots.append(PointerSlot(offset, source == "result", index,
                                 parse_size(pointer.get("element_offset", 0), count,
                                            f"pointer at offset {offset} element_offset")))
    parsed = Call(-1, label, str(call.get("kind", "")), image, tuple(slots), tuple(results),
                  tuple(operands), library, entry)
    if count:
        _parse_symbolic(parsed, call, args, symbols, bucket_libraries)
    elif args.get("patches") or call.get("buckets"):
        raise ValueError("the call has patches or buckets but the plan declares no symbols")
    return parsed


def _image_of(text: Any, what: str) -> bytes:
    try:
        return bytes.fromhex(str(text))
    except ValueError as error:
        raise ValueError(f"{what} is not hexadecimal ({error})") from None


def _parse_symbolic(parsed: Call, call: dict, args: dict, symbols: Sequence[dict],
                    bucket_libraries: Optional[Sequence[tuple]]) -> None:
    """Fills in a symbolic call's bucket table, patches and buckets (ValueError when they do
    not fit the image or the symbols)."""
    count = len(symbols)
    table = BucketTable.from_symbols(symbols)
    size = len(parsed.image)
    patches = []
    for patch in args.get("patches", []) or []:
        offset, width = int(patch["offset"]), int(patch["bytes"])
        if width not in (4, 8):
            raise ValueError(f"patch at offset {offset}: {width} bytes (4 or 8)")
        if offset < abi.HEADER_SIZE or offset + width > size:
            raise ValueError(f"patch at offset {offset} lies outside the image's arguments "
                             f"({abi.HEADER_SIZE}..{size})")
        poly = parse_size({"poly": patch.get("poly"), "expr": patch.get("expr", "")}, count,
                          f"patch at offset {offset}")
        patches.append(Patch(offset, width, poly))
    listed = call.get("buckets") or []
    if listed and len(listed) != table.count:
        raise ValueError(f"the call lists {len(listed)} buckets, the symbols' edges make "
                         f"{table.count}")
    if bucket_libraries is not None and len(bucket_libraries) != max(len(listed), 1):
        raise ValueError(f"{len(bucket_libraries)} bucket libraries for {max(len(listed), 1)} buckets")
    buckets = []
    for index, bucket in enumerate(listed or [{}]):
        image = _image_of(bucket.get("hex"), f"bucket {index} hex") if bucket.get("hex") else parsed.image
        if len(image) != size:
            raise ValueError(f"bucket {index}: its image holds {len(image)} bytes, args {size}")
        library, entry = (bucket_libraries[index] if bucket_libraries is not None
                          else (parsed.library, parsed.entry))
        buckets.append(Bucket(image, library, entry))
    parsed.table, parsed.patches, parsed.buckets = table, tuple(patches), tuple(buckets)


def check_call(call: dict, symbols: Sequence[dict] | None = None) -> None:
    """Raises ValueError when a plan call's executable part is inconsistent (its argument
    image, pointer slots, operands or results; with the plan's `symbols`, its polynomials,
    patches and buckets); registers nothing."""
    _parse_call(call, None, None, symbols or None)


_calls_lock = threading.RLock()
_calls: list[Call] = []
_call_by_key: dict[tuple, int] = {}


def register_call(call: dict | str, library: str | Path | None = None, *,
                  entry: str | None = None, symbols: Sequence[dict] | None = None,
                  bucket_libraries: Sequence[tuple] | None = None) -> int:
    """Registers a plan call (a dict, or its JSON text) for `fact::launch`; returns its number.
    `library`: the kernel library that runs it on CUDA (None: CPU only, through the host
    reference); `entry`: its entry symbol (default: fact_kernel_info's "entry"). `symbols`:
    the plan's "symbols" (a symbolic plan: the call's sizes are polynomials over them, and each
    launch passes their values); `bucket_libraries`: (library, entry) per entry of the call's
    "buckets" (default: `library` for all). The same call and libraries give the same number.
    Raises ValueError for an inconsistent call, and KernelLoadError when a library cannot be
    loaded."""
    document = json.loads(call) if isinstance(call, str) else call
    path = str(Path(library).resolve()) if library is not None else None
    if bucket_libraries is not None:
        bucket_libraries = [(str(Path(lib).resolve()) if lib is not None else None, ent)
                            for lib, ent in bucket_libraries]
    parsed = _parse_call(document, path, entry, symbols, bucket_libraries)
    key = (parsed.image, parsed.slots, parsed.results, parsed.operands, path, entry,
           parsed.table, parsed.patches, parsed.buckets)
    with _calls_lock:
        if key in _call_by_key:
            return _call_by_key[key]
        libraries = {(b.library, b.entry) for b in parsed.buckets} | {(path, entry)}
        for lib, ent in sorted(libraries, key=str):
            if lib is None:
                continue
            if not Path(lib).is_file():
                raise kernels.KernelLoadError(f"kernel library {lib} does not exist")
            if torch.cuda.is_available():
                use_native_if_available()
            if not native.active() or _is_host_library(lib, ent):
                kernels.load(lib, ent)  # the ctypes implementation runs it: check it loads
        if path is not None:
            parsed.host = _is_host_library(path, entry)
        parsed.id = len(_calls)
        if native.active():
            _register_natively(parsed)
        _calls.append(parsed)
        _call_by_key[key] = parsed.id
        return parsed.id


def _is_host_library(path: str, entry: str | None) -> bool:
    """Whether the kernel library at `path` was built for the host (CPU path)."""
    try:
        return kernels.load(path, entry).info.get("device") == "host"
    except kernels.KernelLoadError:
        return False


def registered_call(call: int) -> Call:
    """The registered call numbered `call`; KeyError when there is none."""
    if not 0 <= call < len(_calls):
        raise KeyError(f"fact::launch: no call {call} (register it with fact.ops.register_call)")
    return _calls[call]


def _register_natively(call: Call) -> None:
    if call.symbolic:
        # Shapes, strides and element offsets are polynomials: registered by register_sizes.
        meta = [torch.empty(0, dtype=r.dtype, device="meta") for r in call.results]
        operands = [torch.empty(0, dtype=o.dtype, device="meta") for o in call.operands]
        offsets = [0] * len(call.slots)
        checked = [0] * len(call.operands)
    else:
        # A result's prototype carries its allocation: the native op reads its storage size.
        meta = [allocate_result(r, "meta") for r in call.results]
        operands = [torch.empty_strided(o.shape, o.stride, dtype=o.dtype, device="meta")
                    if o.shape is not None else torch.empty(0, dtype=o.dtype, device="meta")
                    for o in call.operands]
        offsets = [s.element_offset for s in call.slots]
        checked = [int(o.shape is not None) for o in call.operands]
    native_id = native.register_call(
        call.image.hex(), [s.offset for s in call.slots], [int(s.from_result) for s in call.slots],
        [s.index for s in call.slots], offsets, meta, operands, checked,
        call.library or "", call.entry or "", call.describe())
    if native_id != call.id:
        raise RuntimeError(f"the native call registry numbered call {call.id} {native_id}")
    if call.symbolic:
        native.register_sizes(native_id, **_native_size_tables(call))


def _native_size_tables(call: Call) -> dict:
    """A symbolic call's sizes as flat integer tables for the native registry: every shape,
    stride, element offset and patch is a polynomial (a constant: one term without symbols) in
    one table (term_starts, coefficients, exponents: `count` per term), referred to by index."""
    count = len(call.table.edges)
    term_starts, coefficients, exponents = [0], [], []

    def poly(size) -> int:
        terms = size.terms if isinstance(size, Poly) else ((int(size), (0,) * count),)
        for coefficient, powers in terms:
            coefficients.append(int(coefficient))
            exponents.extend(int(e) for e in powers)
        term_starts.append(len(coefficients))
        return len(term_starts) - 2

    result_polys, result_ranks = [], []
    for spec in call.results:
        result_ranks.append(len(spec.shape))
        result_polys += [poly(v) for v in spec.shape] + [poly(v) for v in spec.stride]
    operand_polys, operand_ranks = [], []
    for spec in call.operands:
        if spec.shape is None:
            operand_ranks.append(-1)
            continue
        operand_ranks.append(len(spec.shape))
        operand_polys += [poly(v) for v in spec.shape] + [poly(v) for v in spec.stride]
    slot_polys = [poly(s.element_offset) for s in call.slots]
    patch_polys = [poly(p.poly) for p in call.patches]
    return {
        "edges": [v for values in call.table.edges for v in values],
        "edge_counts": [len(values) for values in call.table.edges],
        "term_starts": term_starts, "coefficients": coefficients, "exponents": exponents,
        "result_polys": result_polys, "result_ranks": result_ranks,
        "operand_polys": operand_polys, "operand_ranks": operand_ranks, "slot_polys": slot_polys,
        "patch_offsets": [p.offset for p in call.patches], "patch_bytes": [p.bytes for p in call.patches],
        "patch_polys": patch_polys,
        "bucket_images": ["" if b.image == call.image else b.image.hex() for b in call.buckets],
        "bucket_libraries": [b.library or "" for b in call.buckets],
        "bucket_entries": [b.entry or "" for b in call.buckets],
    }


_BOUND_CACHE_LIMIT = 256


def _bound(call: Call, sizes: Sequence[Any]) -> Call:
    """The call at concrete symbol sizes (a static call itself): the bucket's image with the
    patches written, its library, and shapes, strides and element offsets evaluated. Cached per
    sizes. ValueError for sizes that do not fit the call."""
    if not call.symbolic:
        if len(sizes):
            raise ValueError(f"{call.describe()}: a static call takes no sizes, got {list(sizes)}")
        return call
    key = tuple(int(v) for v in sizes)
    bound = call._bound.get(key)
    if bound is not None:
        return bound
    if not key:
        raise ValueError(f"{call.describe()}: planned over {', '.join(call.table.names)}; pass "
                         f"their sizes")
    if any(v < 0 for v in key):
        raise ValueError(f"{call.describe()}: negative size in {list(key)}")
    try:
        row = call.table.index(key)
    except ValueError as error:
        raise ValueError(f"{call.describe()}: {error}") from None
    bucket = call.buckets[row] if len(call.buckets) == call.table.count else call.buckets[0]
    image = bytearray(bucket.image)
    for patch in call.patches:
        _write_patch(call, image, patch, patch.poly.value(key))

    def concrete(spec: TensorSpec) -> TensorSpec:
        if spec.shape is None:
            return spec
        return TensorSpec(spec.dtype, tuple(evaluate(v, key) for v in spec.shape),
                          tuple(evaluate(v, key) for v in spec.stride))

    slots = tuple(PointerSlot(s.offset, s.from_result, s.index, evaluate(s.element_offset, key))
                  for s in call.slots)
    bound = Call(call.id, call.label, call.kind, bytes(image), slots,
                 tuple(concrete(r) for r in call.results), tuple(concrete(o) for o in call.operands),
                 bucket.library, bucket.entry, host=call.host)
    if len(call._bound) >= _BOUND_CACHE_LIMIT:
        call._bound.clear()
    call._bound[key] = bound
    return bound


def _write_patch(call: Call, image: bytearray, patch: Patch, value: int) -> None:
    """`value` little-endian in `patch.bytes` bytes at `patch.offset` (two's complement for a
    negative value); ValueError when it does not fit."""
    bits = 8 * patch.bytes
    if not -(1 << (bits - 1)) <= value < (1 << bits):
        raise ValueError(f"{call.describe()}: patch at offset {patch.offset} ({patch.poly.expr or 'poly'}"
                         f" = {value}) does not fit in {patch.bytes} bytes")
    image[patch.offset:patch.offset + patch.bytes] = (value & ((1 << bits) - 1)).to_bytes(patch.bytes, "little")


# --------------------------------------------------------------------------------------------
# What every implementation does


def _same_strides(tensor: torch.Tensor, spec) -> bool:
    """The operand's strides are the planned ones on every dim of size > 1 (the stride of a
    size-1 dim is never read, and PyTorch and torch.export may record different ones for it)."""
    return all(size == 1 or got == want
               for size, got, want in zip(tensor.shape, tensor.stride(), spec.stride))


def _check_operands(call: Call, operands: Sequence[torch.Tensor]) -> None:
    if len(operands) != len(call.operands):
        raise ValueError(f"{call.describe()}: {len(operands)} operands, the call has "
                         f"{len(call.operands)}")
    for index, (tensor, spec) in enumerate(zip(operands, call.operands)):
        if tensor.dtype != spec.dtype:
            raise ValueError(f"{call.describe()}: operand {index} is {tensor.dtype}, the call "
                             f"was planned for {spec.dtype}")
        if spec.shape is not None and (tuple(tensor.shape) != spec.shape
                                       or not _same_strides(tensor, spec)):
            raise ValueError(f"{call.describe()}: operand {index} has shape {list(tensor.shape)} "
                             f"stride {list(tensor.stride())}, the call was planned for "
                             f"{list(spec.shape)} stride {list(spec.stride)}")


def _check_results(call: Call, results: Sequence[torch.Tensor]) -> None:
    if len(results) != len(call.results):
        raise ValueError(f"{call.describe()}: {len(results)} results, the call has "
                         f"{len(call.results)}")
    for index, (tensor, spec) in enumerate(zip(results, call.results)):
        if (tensor.dtype, tuple(tensor.shape), tuple(tensor.stride())) != (spec.dtype, spec.shape, spec.stride):
            raise ValueError(f"{call.describe()}: result {index} is {tensor.dtype} "
                             f"{list(tensor.shape)} stride {list(tensor.stride())}, the call "
                             f"writes {spec.dtype} {list(spec.shape)} stride {list(spec.stride)}")
        if spec.alloc_shape is not None:
            # The kernel writes the whole allocation (padded rows past the view included).
            held = tensor.untyped_storage().nbytes() // tensor.element_size() - tensor.storage_offset()
            if held < storage_elements(spec):
                raise ValueError(f"{call.describe()}: result {index}'s storage holds {held} "
                                 f"elements past its offset, the call writes {storage_elements(spec)} "
                                 f"(alloc_shape {list(spec.alloc_shape)}: allocate it with "
                                 f"fact.ops.allocate_result)")


def _check_slots(call: Call, operands: Sequence[torch.Tensor],
                 results: Sequence[torch.Tensor]) -> None:
    """Every pointer slot's tensor has elements, and its address (data_ptr + element_offset)
    and the elements its shape and strides span lie inside its storage (the native op checks
    the same): a view whose storage is smaller than it claims is refused instead of handing the
    kernel an address outside the allocation."""
    for slot in call.slots:
        tensor = results[slot.index] if slot.from_result else operands[slot.index]
        what = f"{'result' if slot.from_result else 'operand'} {slot.index}"
        if tensor.numel() == 0:
            raise ValueError(f"{call.describe()}: {what} has no elements (shape "
                             f"{list(tensor.shape)})")
        if any(stride < 0 for stride in tensor.stride()):
            raise ValueError(f"{call.describe()}: {what} has a negative stride")
        capacity = tensor.untyped_storage().nbytes() // tensor.element_size()
        last = tensor.storage_offset() + sum((size - 1) * stride
                                             for size, stride in zip(tensor.shape, tensor.stride()))
        first = tensor.storage_offset() + slot.element_offset
        if not (0 <= first < capacity and last < capacity):
            raise ValueError(f"{call.describe()}: {what} (shape {list(tensor.shape)} stride "
                             f"{list(tensor.stride())} storage offset {tensor.storage_offset()}, "
                             f"pointer slot element offset {slot.element_offset}) reaches "
                             f"outside its storage of {capacity} elements")


def _device(operands: Sequence[torch.Tensor], results: Sequence[torch.Tensor]) -> torch.device:
    for tensor in (*operands, *results):
        return tensor.device
    raise ValueError("fact::launch: a call with neither operands nor results has no device")


def _allocate(call: Call, device: torch.device) -> list[torch.Tensor]:
    return [allocate_result(r, device) for r in call.results]


def _patched_image(call: Call, operands: Sequence[torch.Tensor],
                   results: Sequence[torch.Tensor]) -> ctypes.Array:
    """A copy of the call's image (8-byte aligned) with every pointer slot filled in."""
    _check_slots(call, operands, results)
    buffer = (ctypes.c_uint64 * ((len(call.image) + 7) // 8))()
    ctypes.memmove(buffer, call.image, len(call.image))
    for slot in call.slots:
        tensor = results[slot.index] if slot.from_result else operands[slot.index]
        address = tensor.data_ptr() + slot.element_offset * tensor.element_size()
        struct.pack_into("<Q", buffer, slot.offset, address)
    return buffer


def _run_reference(call: Call, operands: Sequence[torch.Tensor],
                   results: Sequence[torch.Tensor]) -> None:
    """fact_reference_call on host memory; raises RuntimeError with the FactStatus's name."""
    library = _engine.reference_library()
    image = _patched_image(call, operands, results)
    status = library.call(ctypes.addressof(image))
    if status != abi.FACT_OK:
        raise RuntimeError(f"{call.describe()}: fact_reference_call ({library.path}) returned "
                           f"{abi.status_name(status)}")


def _run_kernel(call: Call, operands: Sequence[torch.Tensor],
                results: Sequence[torch.Tensor]) -> None:
    """The call's kernel library through ctypes on the current stream."""
    if call.library is None:
        raise RuntimeError(f"{call.describe()}: no kernel library was registered for it (CUDA "
                           f"tensors need one)")
    library = kernels.load(call.library, call.entry)
    image = _patched_image(call, operands, results)
    address = ctypes.addressof(image)
    device = _device(operands, results)
    if call._workspace is None:
        call._workspace = library.workspace_size(address)
    workspace = (torch.empty(call._workspace, dtype=torch.uint8, device=device)
                 if call._workspace else None)
    stream = torch.cuda.current_stream(device).cuda_stream
    status = library.launch(address, workspace.data_ptr() if workspace is not None else None, stream)
    if status != abi.FACT_OK:
        raise RuntimeError(f"{call.describe()}: {library.entry_name} returned {abi.status_name(status)}")


def _run_host_kernel(call: Call, operands: Sequence[torch.Tensor],
                     results: Sequence[torch.Tensor]) -> None:
    """A host library's entry on host memory (no stream); raises RuntimeError with the status."""
    library = kernels.load(call.library, call.entry)
    image = _patched_image(call, operands, results)
    address = ctypes.addressof(image)
    if call._workspace is None:
        call._workspace = library.workspace_size(address)
    workspace = torch.empty(call._workspace, dtype=torch.uint8) if call._workspace else None
    status = library.launch(address, workspace.data_ptr() if workspace is not None else None, 0)
    if status != abi.FACT_OK:
        raise RuntimeError(f"{call.describe()}: {library.entry_name} returned {abi.status_name(status)}")


def _run_on_cpu(call: Call, operands, results) -> None:
    if call.host and call.library is not None:
        _run_host_kernel(call, operands, results)
    else:
        _run_reference(call, operands, results)


def _cpu_launch(operands, call, sizes=()):
    spec = _bound(registered_call(call), sizes)
    _check_operands(spec, operands)
    results = _allocate(spec, _device(operands, []) if operands else torch.device("cpu"))
    _run_on_cpu(spec, operands, results)
    return results


def _cpu_launch_out(operands, results, call, sizes=()):
    spec = _bound(registered_call(call), sizes)
    _check_operands(spec, operands)
    _check_results(spec, results)
    _run_on_cpu(spec, operands, results)


def _python_cuda_launch(operands, call, sizes=()):
    spec = _bound(registered_call(call), sizes)
    _check_operands(spec, operands)
    results = _allocate(spec, _device(operands, []))
    _run_kernel(spec, operands, results)
    return results


def _python_cuda_launch_out(operands, results, call, sizes=()):
    spec = _bound(registered_call(call), sizes)
    _check_operands(spec, operands)
    _check_results(spec, results)
    _run_kernel(spec, operands, results)


def _fake_launch(operands, call, sizes=()):
    """The results as empty tensors; for a symbolic call with the polynomial shapes and strides
    of `sizes` (SymInts under torch.export / torch.compile), so the traced graph is symbolic."""
    spec = registered_call(call)
    device = operands[0].device if operands else torch.device("cpu")
    if not spec.symbolic:
        if len(sizes):
            raise ValueError(f"{spec.describe()}: a static call takes no sizes, got {list(sizes)}")
        return _allocate(spec, device)
    if len(sizes) != len(spec.table.edges):
        raise ValueError(f"{spec.describe()}: {len(sizes)} sizes for the symbols "
                         f"{', '.join(spec.table.names)}")
    return [torch.empty_strided([evaluate(v, sizes) for v in r.shape],
                                [evaluate(v, sizes) for v in r.stride], dtype=r.dtype, device=device)
            for r in spec.results]


def _fake_launch_out(operands, results, call, sizes=()):
    return None


def _no_backward(ctx, *grads):
    raise RuntimeError("fact::launch has no backward: this graph was composed for inference. Run it "
                       "under torch.no_grad() or torch.inference_mode(), or compose a module that "
                       "trains: fact.optimize(model.train(), inputs) with grad enabled, or "
                       "torch.compile(model, backend=\"fact\") (AOTAutograd's forward and backward "
                       "graphs are composed; docs/compose.md, \"Training\")")


LAUNCH_SCHEMA = "launch(Tensor[] operands, int call, SymInt[] sizes=[]) -> Tensor[]"
LAUNCH_OUT_SCHEMA = "launch_out(Tensor[] operands, Tensor(a!)[] results, int call, SymInt[] sizes=[]) -> ()"

# The schemas and the kernels every process has. FRAGMENT: other code may add ops to `fact`.
# needs_exact_strides: Inductor hands the op its operands with the strides they had when the
# graph was captured (the argument images were written for those strides).
_definitions = torch.library.Library("fact", "FRAGMENT")
_definitions.define(LAUNCH_SCHEMA, tags=(torch.Tag.needs_exact_strides,))
_definitions.define(LAUNCH_OUT_SCHEMA)
# The Python kernels run outside TorchDynamo: a composed graph run from inside a torch.compile'd
# region (a module trained over declared ranges) would otherwise have dynamo trace each call.
_definitions.impl("launch", torch._dynamo.disable(_cpu_launch), "CPU")
_definitions.impl("launch_out", torch._dynamo.disable(_cpu_launch_out), "CPU")
torch.library.register_fake("fact::launch", _fake_launch, lib=_definitions)
torch.library.register_fake("fact::launch_out", _fake_launch_out, lib=_definitions)

# The Python kernels the native library replaces (CUDA, Autograd); dropped as one when it loads.
_python_kernels: Optional[torch.library.Library] = None


def _register_python_kernels() -> None:
    global _python_kernels
    library = torch.library.Library("fact", "FRAGMENT")
    library.impl("launch", torch._dynamo.disable(_python_cuda_launch), "CUDA")
    library.impl("launch_out", torch._dynamo.disable(_python_cuda_launch_out), "CUDA")
    torch.library.register_autograd("fact::launch", _no_backward, lib=library)
    _python_kernels = library


_register_python_kernels()

launch = torch.ops.fact.launch.default
launch_out = torch.ops.fact.launch_out.default

_install_lock = threading.Lock()


def use_native_if_available() -> bool:
    """Makes the native implementation run CUDA tensors' fact::launch / launch_out when it can
    be built here (fact.native), registering the calls made so far with it. Idempotent; the
    Python kernels stay when it cannot (fact.native.reason() says why). Called by
    register_call; never from inside a fact::launch call."""
    global _python_kernels
    with _install_lock:
        if native.active():
            return True
        if not native.available():
            if torch.cuda.is_available() and os.environ.get("FACT_NATIVE", "1") != "0":
                warnings.warn(f"fact::launch: {native.describe()}")
            return False
        assert _python_kernels is not None
        with _calls_lock:  # no call is registered between the load and the catch-up below
            _python_kernels._destroy()  # no kernel is registered twice for one key
            _python_kernels = None
            try:
                native.load_library()
            except Exception as error:  # noqa: BLE001 - any load failure leaves the Python path
                native.mark_unavailable(f"loading {native.library_path()} failed: {error}")
                _register_python_kernels()
                warnings.warn(f"fact::launch: {native.describe()}")
                return False
            for call in _calls:
                _register_natively(call)
        return True


def describe_implementation(device_type: str = "cuda") -> str:
    """Which implementation runs fact::launch for tensors on `device_type`, and why."""
    if device_type == "cuda":
        return native.describe()
    if device_type == "cpu":
        try:
            where = str(_engine.reference_library_path())
        except _engine.EngineNotFound as error:
            return f"host reference (fact_reference_call; unavailable: {error})"
        return f"host reference (fact_reference_call in {where})"
    return f"none for '{device_type}' tensors"
