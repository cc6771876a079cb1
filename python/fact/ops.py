"""`fact::gemm`: the custom op every composed GEMM-family subgraph calls.

    D = epilogue(alpha · A · B)   with A: batch×M×K, B: batch×K×N, D reshaped to `out_shape`

Operands are addressed as the kernel sees them: `a_geometry` / `b_geometry` are
[layout (0 = row-major, 1 = column-major), leading dimension, batch stride] in elements from the
tensor's data pointer (GemmProblem's operand fields). `bias` is a length-N vector; `c` the M×N
operand of a residual or multiply step (any tensor with batch·M·N elements, read in row-major
order). `epilogue` lists the steps in order, comma-separated: `scale:<factor>`, `bias`,
`act:<name>` (relu, gelu_erf, gelu_tanh, silu, sigmoid, leaky_relu with slope act_p0, hardtanh
clamped to [act_p0, act_p1]), `residual` (adds beta·C), `multiply` (times C).

Implementations: CUDA tensors with a kernel (`kernel_handle` >= 0, or `kernel_id` naming a loaded
library) call the library through ctypes on the current stream; everything else (CPU tensors,
no kernel) runs the reference: float64 math with torch ops, cast to `out_dtype`. The fake
implementation only allocates the output, so the op traces under torch.compile / torch.export.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence

import torch

from fact import kernels

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


@torch.library.custom_op("fact::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], c: Optional[torch.Tensor],
         m: int, n: int, k: int, batch: int, a_geometry: list[int], b_geometry: list[int],
         out_shape: list[int], out_dtype: torch.dtype, alpha: float, beta: float, act_p0: float,
         act_p1: float, epilogue: str, kernel_handle: int, kernel_id: str) -> torch.Tensor:
    if a.device.type == "cuda":
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


@gemm.register_fake
def _gemm_fake(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape, out_dtype, alpha,
               beta, act_p0, act_p1, epilogue, kernel_handle, kernel_id):
    return a.new_empty(tuple(out_shape), dtype=out_dtype)
