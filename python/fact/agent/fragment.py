"""A match's reference semantics (the captured graph fragment, include/fact/registry/semantics.hpp)
run by PyTorch: the reference the gates verify a kernel against when they have the fragment
and not the model (registry entries, agent tasks).

The fragment is graph JSON (docs/graph_json.md) of the replaced nodes alone: every value read
from outside is an input. `Fragment.run(values)` executes its ATen ops in order — in float64
(`widen=True`: floating inputs and every floating dtype argument widened, as fact.verify does
with the lifted FX subgraph) or in the model's dtypes (the same-run baseline of the timing).
A node whose target is not an ATen op, or an argument kept as text (`{"repr": ...}`), cannot be
replayed: `Fragment.problem` says which (the gates then need the model).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
          "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


@dataclass(frozen=True)
class TensorSpec:
    id: str
    kind: str            # input, parameter, buffer, constant (as the fragment says)
    shape: tuple
    stride: tuple
    dtype: torch.dtype

    def empty(self, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=device)


def _resolve_op(target: str):
    """"aten.linear.default" -> torch.ops.aten.linear.default; None when it is not an ATen op."""
    parts = target.split(".")
    if len(parts) < 2 or parts[0] != "aten":
        return None
    packet = getattr(torch.ops.aten, parts[1], None)
    if packet is None:
        return None
    return getattr(packet, parts[2] if len(parts) > 2 else "default", None)


class Fragment:
    """A fragment document (Semantics.fragment) as a runnable function."""

    def __init__(self, doc: dict):
        self.doc = doc
        values = {v["id"]: v for v in doc.get("values", [])}
        self.inputs = [self._spec(values[i]) for i in doc.get("inputs", [])]
        self.outputs = [self._spec(values[o]) for o in doc.get("outputs", [])]
        self.nodes = list(doc.get("nodes", []))
        self.problem = self._check()

    @staticmethod
    def _spec(value: dict) -> TensorSpec:
        dtype = DTYPES.get(value.get("dtype", ""))
        if dtype is None:
            raise ValueError(f"value {value.get('id')}: dtype {value.get('dtype')!r} is not supported")
        return TensorSpec(value["id"], value.get("kind", "input"), tuple(value.get("shape", [])),
                          tuple(value.get("stride", [])), dtype)

    def _check(self) -> str:
        for node in self.nodes:
            if _resolve_op(node.get("target", "")) is None:
                return f"node {node.get('id')}: {node.get('target')} is not an ATen op PyTorch can replay"
            for arg in [*node.get("args", []), *node.get("kwargs", {}).values()]:
                if "repr" in arg:
                    return f"node {node.get('id')}: an argument is kept as text ({arg['repr'][:60]})"
        return ""

    def describe(self) -> list[str]:
        """One line per node: "out = aten.op(arg, ...)"."""
        lines = []
        for node in self.nodes:
            args = [self._arg_text(a) for a in node.get("args", [])]
            args += [f"{k}={self._arg_text(a)}" for k, a in node.get("kwargs", {}).items()]
            lines.append(f"{', '.join(node.get('outputs', []))} = {node.get('target')}({', '.join(args)})")
        return lines

    @staticmethod
    def _arg_text(arg: dict) -> str:
        for key in ("tensor", "const", "float", "dtype", "device", "repr"):
            if key in arg:
                return str(arg[key])
        if "tensors" in arg:
            return "[" + ", ".join(str(t) for t in arg["tensors"]) + "]"
        return "?"

    def run(self, values: dict[str, torch.Tensor], widen: bool = True) -> list[torch.Tensor]:
        """The outputs for input values (id -> tensor). widen: in float64."""
        if self.problem:
            raise ValueError(self.problem)
        env: dict[str, Any] = {}
        for spec in self.inputs:
            tensor = values[spec.id]
            env[spec.id] = tensor.to(torch.float64) if widen and tensor.is_floating_point() else tensor
        with torch.no_grad():
            for node in self.nodes:
                op = _resolve_op(node["target"])
                args = [self._value(a, env, widen) for a in node.get("args", [])]
                kwargs = {k: self._value(a, env, widen) for k, a in node.get("kwargs", {}).items()}
                result = op(*args, **kwargs)
                results = list(result) if isinstance(result, (tuple, list)) else [result]
                tensors = [r for r in results if isinstance(r, torch.Tensor)]
                for name, tensor in zip(node.get("outputs", []), tensors):
                    env[name] = tensor.to(torch.float64) if widen and tensor.is_floating_point() else tensor
        return [env[o.id] for o in self.outputs]

    @staticmethod
    def _value(arg: dict, env: dict, widen: bool) -> Any:
        if "tensor" in arg:
            return env[arg["tensor"]]
        if "tensors" in arg:
            return [env[t] if t is not None else None for t in arg["tensors"]]
        if "const" in arg:
            return arg["const"]
        if "float" in arg:
            return NON_FINITE[arg["float"]]
        if "dtype" in arg:
            dtype = DTYPES[arg["dtype"]]
            return torch.float64 if widen and dtype.is_floating_point else dtype
        if "device" in arg:
            return torch.device(arg["device"])
        raise ValueError(f"argument {arg} cannot be replayed")


def random_inputs(specs: Sequence[TensorSpec], generator: torch.Generator,
                  device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Fresh values for every input: normal for floating tensors, 0/1 for integer and boolean
    ones, each with its shape, strides and dtype (from a dense base long enough for every
    addressed element)."""
    out = {}
    for spec in specs:
        extent = 1 + sum((s - 1) * st for s, st in zip(spec.shape, spec.stride) if s > 0)
        if spec.dtype.is_floating_point:
            base = torch.randn(max(extent, 1), generator=generator, dtype=torch.float32)
        else:
            base = torch.randint(0, 2, (max(extent, 1),), generator=generator)
        out[spec.id] = base.to(device=device, dtype=spec.dtype).as_strided(spec.shape, spec.stride)
    return out
