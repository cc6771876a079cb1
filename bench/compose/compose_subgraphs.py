"""The subgraphs a composed module replaced, one per `fact::gemm` (or `fact::gemm_planned`)
call, for timing each on its own: `record_gemm_calls` runs the composed graph once and keeps
every call's op and arguments (the tensors it really received), and `GemmSubgraph` is the same
computation written as PyTorch (linear + epilogue steps), for eager and
torch.compile(mode="max-autotune").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from fact import kernels, ops

# Positions of fact::gemm's arguments (python/fact/ops.py)
A, B, BIAS, C, M, N, K, BATCH, A_GEOMETRY, B_GEOMETRY, OUT_SHAPE, OUT_DTYPE, ALPHA, BETA, \
    ACT_P0, ACT_P1, EPILOGUE, KERNEL_HANDLE, KERNEL_ID = range(19)


@dataclass
class GemmCall:
    node: str          # FX node name of the call in the composed graph
    args: tuple        # fact::gemm's 19 positional arguments for this call
    op: Any = None     # the op the graph called (default: fact::gemm with `args`)
    op_args: tuple = ()  # the arguments the graph passed to `op`

    @property
    def shape(self) -> str:
        a = self.args
        batch = f"{a[BATCH]}x" if a[BATCH] != 1 else ""
        return f"{batch}{a[M]}x{a[N]}x{a[K]}"

    @property
    def fusion(self) -> str:
        """gemm + the epilogue steps: "gemm_bias_gelu_tanh"."""
        words = ["gemm"]
        for kind, argument in ops.parse_epilogue(self.args[EPILOGUE]):
            words.append(argument if kind == "act" else kind)
        return "_".join(words)

    def kernel_name(self) -> str:
        """The kernel library's readable name (its configuration), or why there is none."""
        handle = self.args[KERNEL_HANDLE]
        if handle < 0 and self.args[KERNEL_ID]:
            handle = kernels.handle_for_key(self.args[KERNEL_ID])
        if handle < 0:
            return "reference implementation (no kernel)"
        info = kernels.library(handle).info
        return str(info.get("name") or info.get("entry") or f"handle {handle}")

    def run(self) -> torch.Tensor:
        """The call exactly as the composed graph makes it."""
        if self.op is None:
            return torch.ops.fact.gemm.default(*self.args)
        return self.op(*self.op_args)

    def reference(self) -> torch.Tensor:
        """The call's meaning in float64 (fact.ops.reference_gemm), not cast back."""
        a = self.args
        return ops.reference_gemm(a[A], a[B], a[BIAS], a[C], a[M], a[N], a[K], a[BATCH],
                                  a[A_GEOMETRY], a[B_GEOMETRY], a[OUT_SHAPE], torch.float64,
                                  a[ALPHA], a[BETA], a[ACT_P0], a[ACT_P1], a[EPILOGUE])

    def tensors(self) -> tuple[Any, Any, Any, Any]:
        return self.args[A], self.args[B], self.args[BIAS], self.args[C]


def _planned_op():
    """fact::gemm_planned where this checkout has it, else None."""
    try:
        return torch.ops.fact.gemm_planned.default
    except (AttributeError, RuntimeError):
        return None


class _CallRecorder(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule):
        super().__init__(module)
        self.calls: list[GemmCall] = []
        self.gemm = torch.ops.fact.gemm.default
        self.planned = _planned_op()

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function" and n.target in (self.gemm, self.planned):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            if kwargs:
                raise ValueError(f"{n.target} node {n.name} has keyword arguments; expected positional only")
            args = tuple(args)
            if n.target is self.gemm:
                self.calls.append(GemmCall(n.name, args, self.gemm, args))
            else:  # (a, b, bias, c, plan): the plan holds fact::gemm's other arguments
                full = args[:4] + tuple(ops.planned_arguments(args[4]))
                self.calls.append(GemmCall(n.name, full, self.planned, args))
        return result


def record_gemm_calls(graph_module: torch.fx.GraphModule, inputs: tuple) -> list[GemmCall]:
    """Runs the composed graph on `inputs` and returns its fact::gemm / fact::gemm_planned calls
    in execution order."""
    recorder = _CallRecorder(graph_module)
    with torch.no_grad():
        recorder.run(*inputs)
    return recorder.calls


def _activation(x: torch.Tensor, name: str, p0: float, p1: float) -> torch.Tensor:
    if name == "relu":
        return F.relu(x)
    if name == "gelu_erf":
        return F.gelu(x)
    if name == "gelu_tanh":  # the formula as minGPT writes it
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    if name == "silu":
        return F.silu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "leaky_relu":
        return F.leaky_relu(x, p0)
    if name == "hardtanh":
        return F.hardtanh(x, p0, p1)
    raise ValueError(f"unknown activation '{name}'")


class GemmSubgraph(torch.nn.Module):
    """PyTorch form of one fact::gemm call, taking (a, b, bias, c) as the call does. A row-major
    A with leading dimension K and an N×K weight (column-major B, ld K) run as F.linear, as in
    the model; any other geometry as a strided matmul."""

    def __init__(self, call: GemmCall):
        super().__init__()
        a = call.args
        self.m, self.n, self.k, self.batch = a[M], a[N], a[K], a[BATCH]
        self.a_geometry, self.b_geometry = list(a[A_GEOMETRY]), list(a[B_GEOMETRY])
        self.out_shape, self.out_dtype = list(a[OUT_SHAPE]), a[OUT_DTYPE]
        self.alpha, self.beta, self.p0, self.p1 = a[ALPHA], a[BETA], a[ACT_P0], a[ACT_P1]
        self.steps = ops.parse_epilogue(a[EPILOGUE])
        weight = a[B]
        self.as_linear = (
            self.batch == 1 and self.a_geometry == [0, self.k, 0] and a[A].is_contiguous()
            and a[A].numel() == self.m * self.k
            and self.b_geometry[:2] == [1, self.k] and weight.is_contiguous()
            and tuple(weight.shape) == (self.n, self.k))

    def _operand(self, t: torch.Tensor, rows: int, cols: int, geometry: list[int]) -> torch.Tensor:
        """`t` read as the op reads it: from its data pointer (as_strided keeps t's storage
        offset when none is given), with the geometry's layout, leading dimension and batch
        stride."""
        layout, ld, batch_stride = geometry
        strides = (ld, 1) if layout == 0 else (1, ld)
        if self.batch == 1:
            return torch.as_strided(t, (rows, cols), strides)
        return torch.as_strided(t, (self.batch, rows, cols), (batch_stride, *strides))

    def forward(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                c: torch.Tensor | None) -> torch.Tensor:
        steps = list(self.steps)
        if self.as_linear:
            fold_bias = self.alpha == 1.0 and steps and steps[0][0] == "bias"
            x = F.linear(a.reshape(self.m, self.k), b, bias if fold_bias else None)
            if fold_bias:
                steps = steps[1:]
        else:
            x = torch.matmul(self._operand(a, self.m, self.k, self.a_geometry),
                             self._operand(b, self.k, self.n, self.b_geometry))
        if self.alpha != 1.0:
            x = x * self.alpha
        for kind, argument in steps:
            if kind == "scale":
                x = x * float(argument)
            elif kind == "bias":
                x = x + bias
            elif kind == "act":
                x = _activation(x, argument, self.p0, self.p1)
            elif kind == "residual":
                residual = c.reshape(x.shape)
                x = x + (residual if self.beta == 1.0 else self.beta * residual)
            elif kind == "multiply":
                x = x * c.reshape(x.shape)
        return x.reshape(self.out_shape).to(self.out_dtype)
