"""The subgraphs a composed module replaced, for timing each on its own: `replacement_subgraphs`
takes every composed replacement of a ComposedModule (its `replacements`: the subgraph lifted
out of the exported graph and its fact::launch calls) with the values its inputs take when
the module runs on `inputs`. `SubgraphCase.run` makes the replacement's calls as the composed
graph does; `module` is the replaced subgraph itself, for eager and
torch.compile(mode="max-autotune"); `reference()` runs it in float64. Nothing here knows a kind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.fx

from fact.verify import example_values, float64_run


def _attribute(root: torch.nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


@dataclass
class SubgraphCase:
    label: str
    rule: str
    summary: str
    kernels: list
    module: torch.fx.GraphModule
    tensors: list                 # the module's inputs (real values from the example run)
    operands: dict                # call operand value id -> value
    calls: list                   # (call number, operand value ids, result value ids)
    outputs: list
    shapes: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.label}_{self.rule}"

    def run(self) -> tuple:
        """The replacement's calls, as the composed graph makes them."""
        env = dict(self.operands)
        for number, operands, results in self.calls:
            made = torch.ops.fact.launch.default([env[vid] for vid in operands], number)
            env.update(zip(results, made))
        return tuple(env[vid] for vid in self.outputs)

    def pytorch(self) -> tuple:
        """The replaced subgraph in PyTorch."""
        return tuple(self.module(*self.tensors))

    def reference(self) -> tuple:
        """The replaced subgraph in float64."""
        return float64_run(self.module, self.tensors)


def relative_error(outputs: Sequence[torch.Tensor], references: Sequence[torch.Tensor]) -> float | None:
    """The largest ‖out − ref‖ / ‖ref‖ over the outputs; None when one is not finite."""
    worst = 0.0
    for out, ref in zip(outputs, references):
        ref = ref.double()
        value = ((out.double() - ref).norm() / ref.norm()).item()
        if not math.isfinite(value):
            return None
        worst = max(worst, value)
    return worst


def replacement_subgraphs(composed, inputs: Sequence[Any]) -> list[SubgraphCase]:
    """One SubgraphCase per composed replacement of `composed` (a fact ComposedModule), with the
    values its inputs take when the original module runs on `inputs`."""
    records = getattr(composed, "replacements", [])
    if not records:
        return []
    exported = torch.export.export(composed.original, tuple(inputs), strict=False)
    graph_module = exported.module(check_guards=False)
    by_name = {node.name: node for node in graph_module.graph.nodes}
    wanted = {name for record in records
              for name, op, _ in [*record.inputs, *record.values.values()] if op != "get_attr"}
    missing = sorted(name for name in wanted if name not in by_name)
    if missing:
        raise ValueError(f"values {', '.join(missing)} are not in the exported graph again")
    found = example_values(graph_module, tuple(inputs), {by_name[name] for name in wanted})

    def value(where):
        name, op, target = where
        if op == "get_attr":
            return _attribute(graph_module, target).detach()
        return found[by_name[name]]

    cases = []
    for record in records:
        tensors = [value(where) for where in record.inputs]
        cases.append(SubgraphCase(
            label=record.label, rule=record.rule, summary=record.summary, kernels=record.kernels,
            module=record.module, tensors=tensors,
            operands={**{vid: value(where) for vid, where in record.values.items()},
                      **getattr(record, "derived", {})},
            calls=record.calls, outputs=record.outputs,
            shapes=[list(t.shape) for t in tensors if isinstance(t, torch.Tensor)]))
    return cases
