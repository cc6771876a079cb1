"""`fact::gemm`: the custom op every composed GEMM-family subgraph calls.

    D = epilogue(alpha · A · B)   with A: batch×M×K, B: batch×K×N, D reshaped to `out_shape`

Operands are addressed as the kernel sees them: `a_geometry` / `b_geometry` are
[layout (0 = row-major, 1 = column-major), leading dimension, batch stride] in elements from the
tensor's data pointer (GemmProblem's operand fields). `bias` is a length-N vector; `c` the M×N
operand of a residual or multiply step (any tensor with batch·M·N elements, read in row-major
order). `epilogue` lists the steps in order, comma-separated: `scale:<factor>`, `bias`,
`act:<name>` (relu, gelu_erf, gelu_tanh, silu, sigmoid, leaky_relu with slope act_p0, hardtanh
clamped to [act_p0, act_p1]), `residual` (adds beta·C), `multiply` (times C).

Implementations (registered per dispatch key, so a call runs no Python the key does not need):
- CUDA, native: src/torch_ext/fact_gemm_op.cpp (fact.native), loaded when a kernel library is
  loaded on a GPU (`fact.kernels.load`); it calls the library's entry from C++.
- CUDA, Python: the fallback when the native one cannot be built (fact.native.reason()): fills
  `FactGemmArgs` with ctypes and calls the library on the current stream.
- CPU, and CUDA tensors without a kernel: the reference, float64 math with torch ops cast to
  `out_dtype` (also the op `fact::gemm_reference`, which the native implementation falls back to).
- Meta (fake): allocates the output only, so the op traces under torch.compile / torch.export.
- Autograd: none. A result computed from tensors that require grad raises on backward.
`describe_implementation()` says which CUDA implementation is registered now.

`fact::gemm_planned(Tensor a, Tensor b, Tensor? bias, Tensor? c, int plan)` is the same op with
everything but the tensors registered once with `plan_gemm(...) -> plan`: passing 19 arguments
from Python through the dispatcher costs more CPU time than a whole eager `F.linear`, passing 5
much less. Plans, like kernel handles, are numbered per process (the native registry mirrors them).
"""
from __future__ import annotations

import math
import os
import threading
import warnings
from typing import Optional, Sequence

import torch

from fact import kernels, native

ROW_MAJOR, COLUMN_MAJOR = 0, 1

ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "leaky_relu", "hardtanh")


def parse_epilogue(epilogue: str) -> list[tuple[str, str]]:
    """"bias,act:gelu_tanh,residual" -> [("bias", ""), ("act", "gelu_tanh"), ("residual", "")];
    raises ValueError for an unknown step."""
    steps = []
    for word in filter(None, (w.strip() for w in epilogue.split(","))):
        kind, _, argument = word.partition(":")
        if kind not in ("scale", "bias", "act", "residual", "multiply"):
            raise ValueError(f"fact::gemm: unknown epilogue step '{word}'")
        if kind == "act" and argument not in ACTIVATIONS:
            raise ValueError(f"fact::gemm: unknown activation '{argument}'")
        if kind == "scale":
            float(argument)
        steps.append((kind, argument))
    return steps


def _operand_view(t: torch.Tensor, rows: int, cols: int, batch: int,
                  geometry: Sequence[int]) -> torch.Tensor:
    layout, ld, batch_stride = (int(g) for g in geometry)
    strides = (ld, 1) if layout == ROW_MAJOR else (1, ld)
    return torch.as_strided(t, (batch, rows, cols), (batch_stride, *strides), t.storage_offset())


def _activation(x: torch.Tensor, name: str, p0: float, p1: float) -> torch.Tensor:
    if name == "relu":
        return torch.relu(x)
    if name == "gelu_erf":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    if name == "silu":
        return x * torch.sigmoid(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "leaky_relu":
        return torch.where(x >= 0, x, p0 * x)
    if name == "hardtanh":
        return torch.clamp(x, p0, p1)
    raise ValueError(f"fact::gemm: unknown activation '{name}'")


def reference_gemm(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape, out_dtype,
                   alpha, beta, act_p0, act_p1, epilogue) -> torch.Tensor:
    """The op's meaning, in float64 on the tensors' device (float32 where float64 is missing)."""
    wide = torch.float64 if a.device.type != "mps" else torch.float32
    a3 = _operand_view(a, m, k, batch, a_geometry).to(wide)
    b3 = _operand_view(b, k, n, batch, b_geometry).to(wide)
    x = alpha * torch.bmm(a3, b3)
    for kind, argument in parse_epilogue(epilogue):
        if kind == "scale":
            x = x * float(argument)
        elif kind == "bias":
            x = x + bias.reshape(1, 1, n).to(wide)
        elif kind == "act":
            x = _activation(x, argument, act_p0, act_p1)
        elif kind == "residual":
            x = x + beta * c.reshape(batch, m, n).to(wide)
        elif kind == "multiply":
            x = x * c.reshape(batch, m, n).to(wide)
    return x.to(out_dtype).reshape(tuple(out_shape))


def gemm_args(a, b, bias, c, d, m, n, k, batch, a_geometry, b_geometry, alpha, beta, act_p0,
              act_p1, split_k: int = 1) -> kernels.FactGemmArgs:
    """FactGemmArgs for the op's operands; `c` and `bias` must be contiguous, `d` a dense
    row-major batch×M×N tensor."""
    args = kernels.FactGemmArgs()
    args.abi_version = kernels.FACT_ABI_VERSION
    args.m, args.n, args.k, args.batch = m, n, k, batch
    args.a, args.lda, args.stride_a = a.data_ptr(), int(a_geometry[1]), int(a_geometry[2])
    args.b, args.ldb, args.stride_b = b.data_ptr(), int(b_geometry[1]), int(b_geometry[2])
    if c is not None:
        args.c, args.ldc, args.stride_c = c.data_ptr(), n, m * n if batch > 1 else 0
    args.d, args.ldd, args.stride_d = d.data_ptr(), n, m * n if batch > 1 else 0
    args.bias = bias.data_ptr() if bias is not None else None
    args.alpha, args.beta, args.act_p0, args.act_p1 = alpha, beta, act_p0, act_p1
    args.split_k = max(1, int(split_k or 1))
    args.sm_count = 0
    return args


def _cuda_gemm(library: kernels.KernelLibrary, a, b, bias, c, m, n, k, batch, a_geometry,
               b_geometry, out_shape, out_dtype, alpha, beta, act_p0, act_p1) -> torch.Tensor | None:
    """Runs the kernel; None when it refuses the problem (cannot_implement)."""
    d = torch.empty(tuple(out_shape), dtype=out_dtype, device=a.device)
    c = c.contiguous() if c is not None else None
    bias = bias.contiguous() if bias is not None else None
    args = gemm_args(a, b, bias, c, d, m, n, k, batch, a_geometry, b_geometry, alpha, beta,
                     act_p0, act_p1, library.info.get("split_k", 1))
    size = library.workspace_size(args)
    workspace = torch.empty(size, dtype=torch.uint8, device=a.device) if size else None
    stream = torch.cuda.current_stream(a.device).cuda_stream
    status = library.launch(args, workspace.data_ptr() if workspace is not None else None, stream)
    if status == kernels.FACT_ERR_CANNOT_IMPLEMENT:
        return None
    if status != kernels.FACT_OK:
        raise kernels.KernelLaunchError(status, f"fact::gemm {library.entry_name}")
    return d


SCHEMA_ARGUMENTS = ("Tensor a, Tensor b, Tensor? bias, Tensor? c, int m, int n, int k, int batch, "
                    "int[] a_geometry, int[] b_geometry, int[] out_shape, ScalarType out_dtype, "
                    "float alpha, float beta, float act_p0, float act_p1, str epilogue, "
                    "int kernel_handle, str kernel_id")
SCHEMA = f"gemm({SCHEMA_ARGUMENTS}) -> Tensor"
PLANNED_SCHEMA = "gemm_planned(Tensor a, Tensor b, Tensor? bias, Tensor? c, int plan) -> Tensor"


def _reference_kernel(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape, out_dtype,
                      alpha, beta, act_p0, act_p1, epilogue, kernel_handle, kernel_id):
    return reference_gemm(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape,
                          out_dtype, alpha, beta, act_p0, act_p1, epilogue)


def _python_cuda_kernel(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape,
                        out_dtype, alpha, beta, act_p0, act_p1, epilogue, kernel_handle, kernel_id):
    """CUDA through ctypes: the fallback when the native implementation is not loaded."""
    handle = kernel_handle if kernel_handle >= 0 else kernels.handle_for_key(kernel_id)
    if handle >= 0:
        library = kernels.library(handle)
        d = _cuda_gemm(library, a, b, bias, c, m, n, k, batch, a_geometry, b_geometry,
                       out_shape, out_dtype, alpha, beta, act_p0, act_p1)
        if d is not None:
            return d
        warnings.warn(f"fact::gemm: {library.entry_name} cannot implement "
                      f"{batch}x{m}x{n}x{k}; using the reference implementation")
    return reference_gemm(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape,
                          out_dtype, alpha, beta, act_p0, act_p1, epilogue)


def _gemm_fake(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape, out_dtype, alpha,
               beta, act_p0, act_p1, epilogue, kernel_handle, kernel_id):
    return a.new_empty(tuple(out_shape), dtype=out_dtype)


_plans_lock = threading.Lock()
_plans: list[tuple] = []           # plan -> fact::gemm's arguments after the four tensors
_plan_by_arguments: dict[tuple, int] = {}


def plan_gemm(m: int, n: int, k: int, batch: int, a_geometry: Sequence[int],
              b_geometry: Sequence[int], out_shape: Sequence[int], out_dtype: torch.dtype,
              alpha: float, beta: float, act_p0: float, act_p1: float, epilogue: str,
              kernel_handle: int, kernel_id: str) -> int:
    """Registers fact::gemm's non-tensor arguments once (the same ones give the same plan);
    returns the plan for `fact::gemm_planned`. Raises ValueError for an unknown epilogue step."""
    parse_epilogue(epilogue)
    arguments = (int(m), int(n), int(k), int(batch), [int(v) for v in a_geometry],
                 [int(v) for v in b_geometry], [int(v) for v in out_shape], out_dtype,
                 float(alpha), float(beta), float(act_p0), float(act_p1), str(epilogue),
                 int(kernel_handle), str(kernel_id))
    key = tuple(tuple(v) if isinstance(v, list) else v for v in arguments)
    with _plans_lock:
        if key in _plan_by_arguments:
            return _plan_by_arguments[key]
        plan = len(_plans)
        if native.active():
            _register_plan_natively(plan, arguments)
        _plans.append(arguments)
        _plan_by_arguments[key] = plan
        return plan


def _register_plan_natively(plan: int, arguments: tuple) -> None:
    native_plan = int(torch.ops.fact_native.register_plan(*arguments))
    if native_plan != plan:
        raise RuntimeError(f"native plan registry gave plan {native_plan}, the Python one {plan}")


def planned_arguments(plan: int) -> tuple:
    """fact::gemm's non-tensor arguments for `plan`."""
    if plan < 0 or plan >= len(_plans):
        raise KeyError(f"fact::gemm_planned: no plan {plan} (register it with fact.ops.plan_gemm)")
    return _plans[plan]


def _planned_reference_kernel(a, b, bias, c, plan):
    return _reference_kernel(a, b, bias, c, *planned_arguments(plan))


def _planned_python_cuda_kernel(a, b, bias, c, plan):
    return _python_cuda_kernel(a, b, bias, c, *planned_arguments(plan))


def _planned_fake(a, b, bias, c, plan):
    arguments = planned_arguments(plan)
    return a.new_empty(tuple(arguments[6]), dtype=arguments[7])


def _no_backward(ctx, *grads):
    raise RuntimeError("fact::gemm has no backward: composed modules are for inference (run them "
                       "under torch.no_grad() or torch.inference_mode())")


# The schema and the kernels every process has. FRAGMENT: other code may add ops to `fact`.
_definitions = torch.library.Library("fact", "FRAGMENT")
_definitions.define(SCHEMA)
_definitions.define(f"gemm_reference({SCHEMA_ARGUMENTS}) -> Tensor")
_definitions.define(PLANNED_SCHEMA)
_definitions.impl("gemm", _reference_kernel, "CPU")
_definitions.impl("gemm_planned", _planned_reference_kernel, "CPU")
_definitions.impl("gemm_reference", _reference_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("fact::gemm", _gemm_fake, lib=_definitions)
torch.library.register_fake("fact::gemm_planned", _planned_fake, lib=_definitions)

# The Python kernels the native library replaces (CUDA, Autograd); dropped as one when it loads.
_python_kernels: Optional[torch.library.Library] = None


def _register_python_kernels() -> None:
    global _python_kernels
    library = torch.library.Library("fact", "FRAGMENT")
    library.impl("gemm", _python_cuda_kernel, "CUDA")
    library.impl("gemm_planned", _planned_python_cuda_kernel, "CUDA")
    torch.library.register_autograd("fact::gemm", _no_backward, lib=library)
    torch.library.register_autograd("fact::gemm_planned", _no_backward, lib=library)
    _python_kernels = library


_register_python_kernels()

gemm = torch.ops.fact.gemm.default
gemm_planned = torch.ops.fact.gemm_planned.default

_install_lock = threading.Lock()


def use_native_if_available() -> bool:
    """Makes the native implementation run CUDA tensors' fact::gemm and fact::gemm_planned when
    it can be built here (see fact.native), registering the kernel libraries and plans made so
    far with it. Idempotent; the
    Python kernels stay when it cannot (fact.native.reason() says why). Called by
    fact.kernels.load; never from inside a fact::gemm call."""
    global _python_kernels
    with _install_lock:
        if native.active():
            return True
        if not native.available():
            if torch.cuda.is_available() and os.environ.get("FACT_NATIVE", "1") != "0":
                warnings.warn(f"fact::gemm: {native.describe()}")
            return False
        assert _python_kernels is not None
        with _plans_lock:  # no plan is registered between the load and the catch-up below
            _python_kernels._destroy()  # no kernel is registered twice for one key
            _python_kernels = None
            try:
                native.load_library()
            except Exception as error:  # noqa: BLE001 - any load failure leaves the Python path
                native.mark_unavailable(f"loading {native.library_path()} failed: {error}")
                _register_python_kernels()
                warnings.warn(f"fact::gemm: {native.describe()}")
                return False
            for handle, path in enumerate(kernels.loaded_paths()):
                native_handle = native.register_kernel(path)
                if native_handle != handle:
                    raise RuntimeError(f"native kernel registry gave handle {native_handle} to "
                                       f"{path}, the Python registry {handle}")
            for plan, arguments in enumerate(_plans):
                _register_plan_natively(plan, arguments)
        return True


def describe_implementation() -> str:
    """Which implementation runs fact::gemm for CUDA tensors in this process, and why."""
    return native.describe()
