"""`fact::launch`: the one custom op every composed replacement calls, whatever its kind.

    fact::launch(Tensor[] operands, int call) -> Tensor[]
    fact::launch_out(Tensor[] operands, Tensor(a!)[] results, int call) -> ()

A call is registered once from a plan call (docs/plan.md) with `register_call(call, library)`,
which returns the integer the graph carries. What a call holds: its argument image (the kind's
ABI struct as bytes, every address zero), its pointer slots (where the address of an operand
or a result goes, with an element offset), its results (shape, stride, dtype), its operands'
dtypes (and layouts when the plan gives them), and its kernel library and entry. The op
allocates the results (`launch`) or takes them (`launch_out`), copies the image, writes each
slot's address (`data_ptr + element_offset * element_size`) and hands the image over. It never
looks inside the image: no kind, epilogue, layout or limit is known here.

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
- Meta (fake): allocates the results only, so the op traces under torch.compile / torch.export.
- Autograd: none (inference only): a result computed from tensors that require grad raises on
  backward.
`describe_implementation(device_type)` says which implementation runs.
"""
from __future__ import annotations

import ctypes
import json
import os
import struct
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import torch

from fact import _engine, abi, kernels, native


@dataclass(frozen=True)
class PointerSlot:
    offset: int           # byte offset of the 64-bit address in the image
    from_result: bool     # the address of a result (else of an operand)
    index: int            # which operand / result
    element_offset: int   # elements added to the tensor's data pointer


@dataclass(frozen=True)
class TensorSpec:
    dtype: torch.dtype
    shape: Optional[tuple] = None   # None: not checked (operands without a layout in the plan)
    stride: Optional[tuple] = None


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

    def describe(self) -> str:
        return f"fact::launch call {self.id}" + (f" ({self.label})" if self.label else "")


def parse_dtype(name: str) -> torch.dtype:
    """"torch.bfloat16" (or "bfloat16") -> torch.bfloat16; ValueError otherwise."""
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype '{name}'")
    return dtype


def _parse_call(call: dict, library: Optional[str], entry: Optional[str]) -> Call:
    """The plan call's executable part, checked for consistency (ValueError with the reason)."""
    label = str(call.get("label", ""))
    args = call.get("args")
    if not isinstance(args, dict):
        raise ValueError("the call has no \"args\" (argument image)")
    text = str(args.get("hex", ""))
    try:
        image = bytes.fromhex(text)
    except ValueError as error:
        raise ValueError(f"args.hex is not hexadecimal ({error})") from None
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
    operands = []
    for index, operand in enumerate(call.get("operands", [])):
        shape, stride = operand.get("shape"), operand.get("stride")
        if (shape is None) != (stride is None):
            raise ValueError(f"operand {index}: shape and stride go together")
        operands.append(TensorSpec(parse_dtype(operand.get("dtype", "")),
                                   tuple(int(v) for v in shape) if shape is not None else None,
                                   tuple(int(v) for v in stride) if stride is not None else None))
    results = []
    for index, result in enumerate(call.get("results", [])):
        shape = [int(v) for v in result.get("shape", [])]
        stride = [int(v) for v in result.get("stride", [])]
        if len(shape) != len(stride):
            raise ValueError(f"result {index}: shape {shape} and stride {stride} differ in rank")
        results.append(TensorSpec(parse_dtype(result.get("dtype", "")), tuple(shape), tuple(stride)))
    slots = []
    for pointer in args.get("pointers", []):
        offset, index = int(pointer["offset"]), int(pointer["index"])
        source = pointer.get("from")
        if source not in ("operand", "result"):
            raise ValueError(f"pointer at offset {offset}: \"from\" is '{source}', not operand "
                             f"or result")
        count = len(results) if source == "result" else len(operands)
        if not 0 <= index < count:
            raise ValueError(f"pointer at offset {offset}: {source} {index} does not exist "
                             f"(the call has {count})")
        if offset < abi.HEADER_SIZE or offset + abi.POINTER_SIZE > size:
            raise ValueError(f"pointer at offset {offset} lies outside the image's arguments "
                             f"({abi.HEADER_SIZE}..{size})")
        slots.append(PointerSlot(offset, source == "result", index,
                                 int(pointer.get("element_offset", 0))))
    return Call(-1, label, str(call.get("kind", "")), image, tuple(slots), tuple(results),
                tuple(operands), library, entry)


def check_call(call: dict) -> None:
    """Raises ValueError when a plan call's executable part is inconsistent (its argument
    image, pointer slots, operands or results); registers nothing."""
    _parse_call(call, None, None)


_calls_lock = threading.RLock()
_calls: list[Call] = []
_call_by_key: dict[tuple, int] = {}


def register_call(call: dict | str, library: str | Path | None = None, *,
                  entry: str | None = None) -> int:
    """Registers a plan call (a dict, or its JSON text) for `fact::launch`; returns its number.
    `library`: the kernel library that runs it on CUDA (None: CPU only, through the host
    reference); `entry`: its entry symbol (default: fact_kernel_info's "entry"). The same call
    and library give the same number. Raises ValueError for an inconsistent call, and
    KernelLoadError when the library cannot be loaded."""
    document = json.loads(call) if isinstance(call, str) else call
    path = str(Path(library).resolve()) if library is not None else None
    parsed = _parse_call(document, path, entry)
    key = (parsed.image, parsed.slots, parsed.results, parsed.operands, path, entry)
    with _calls_lock:
        if key in _call_by_key:
            return _call_by_key[key]
        if path is not None:
            if not Path(path).is_file():
                raise kernels.KernelLoadError(f"kernel library {path} does not exist")
            if torch.cuda.is_available():
                use_native_if_available()
            if not native.active() or _is_host_library(path, entry):
                kernels.load(path, entry)  # the ctypes implementation runs it: check it loads
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
    meta = [torch.empty_strided(r.shape, r.stride, dtype=r.dtype, device="meta") for r in call.results]
    operands = [torch.empty_strided(o.shape, o.stride, dtype=o.dtype, device="meta")
                if o.shape is not None else torch.empty(0, dtype=o.dtype, device="meta")
                for o in call.operands]
    native_id = native.register_call(
        call.image.hex(), [s.offset for s in call.slots], [int(s.from_result) for s in call.slots],
        [s.index for s in call.slots], [s.element_offset for s in call.slots], meta, operands,
        [int(o.shape is not None) for o in call.operands], call.library or "", call.entry or "",
        call.describe())
    if native_id != call.id:
        raise RuntimeError(f"the native call registry numbered call {call.id} {native_id}")


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
    return [torch.empty_strided(r.shape, r.stride, dtype=r.dtype, device=device)
            for r in call.results]


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


def _cpu_launch(operands, call):
    spec = registered_call(call)
    _check_operands(spec, operands)
    results = _allocate(spec, _device(operands, []) if operands else torch.device("cpu"))
    _run_on_cpu(spec, operands, results)
    return results


def _cpu_launch_out(operands, results, call):
    spec = registered_call(call)
    _check_operands(spec, operands)
    _check_results(spec, results)
    _run_on_cpu(spec, operands, results)


def _python_cuda_launch(operands, call):
    spec = registered_call(call)
    _check_operands(spec, operands)
    results = _allocate(spec, _device(operands, []))
    _run_kernel(spec, operands, results)
    return results


def _python_cuda_launch_out(operands, results, call):
    spec = registered_call(call)
    _check_operands(spec, operands)
    _check_results(spec, results)
    _run_kernel(spec, operands, results)


def _fake_launch(operands, call):
    spec = registered_call(call)
    device = operands[0].device if operands else torch.device("cpu")
    return _allocate(spec, device)


def _fake_launch_out(operands, results, call):
    return None


def _no_backward(ctx, *grads):
    raise RuntimeError("fact::launch has no backward: composed modules are for inference (run "
                       "them under torch.no_grad() or torch.inference_mode())")


LAUNCH_SCHEMA = "launch(Tensor[] operands, int call) -> Tensor[]"
LAUNCH_OUT_SCHEMA = "launch_out(Tensor[] operands, Tensor(a!)[] results, int call) -> ()"

# The schemas and the kernels every process has. FRAGMENT: other code may add ops to `fact`.
# needs_exact_strides: Inductor hands the op its operands with the strides they had when the
# graph was captured (the argument images were written for those strides).
_definitions = torch.library.Library("fact", "FRAGMENT")
_definitions.define(LAUNCH_SCHEMA, tags=(torch.Tag.needs_exact_strides,))
_definitions.define(LAUNCH_OUT_SCHEMA)
_definitions.impl("launch", _cpu_launch, "CPU")
_definitions.impl("launch_out", _cpu_launch_out, "CPU")
torch.library.register_fake("fact::launch", _fake_launch, lib=_definitions)
torch.library.register_fake("fact::launch_out", _fake_launch_out, lib=_definitions)

# The Python kernels the native library replaces (CUDA, Autograd); dropped as one when it loads.
_python_kernels: Optional[torch.library.Library] = None


def _register_python_kernels() -> None:
    global _python_kernels
    library = torch.library.Library("fact", "FRAGMENT")
    library.impl("launch", _python_cuda_launch, "CUDA")
    library.impl("launch_out", _python_cuda_launch_out, "CUDA")
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
