"""Verification of replacements planned over declared ranges (docs/dynamic_shapes.md,
"Verification"): each replacement is checked against the subgraph it replaces in float64 at
several assignments of the symbols (SymbolBinding.assignments), each with fresh module inputs
at those sizes; the calls run with the assignment's sizes (buckets, patches, polynomial
shapes), the reference on the graph's own values there."""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx

from fact import verify as checks
from fact.compose.dynamic_plan import SymbolBinding
from fact.symbolic_sizes import evaluate


def assignment_examples(graph_module: torch.fx.GraphModule, binding: SymbolBinding,
                        example_inputs: tuple, nodes: set, on_gpu: bool) -> list[tuple[str, tuple, dict]]:
    """(label, sizes, node -> its value) per verification assignment: the graph run once on
    fresh module inputs at those sizes, keeping `nodes`."""
    made = []
    for index, (label, sizes) in enumerate(binding.assignments(on_gpu)):
        inputs = binding.inputs_at(sizes, example_inputs, seed=5000 + index)
        made.append((label, sizes, checks.example_values(graph_module, inputs, nodes)))
    return made


def calls_at(planned: Any, sizes: Sequence[int]) -> list[checks.CallToCheck]:
    """The replacement's calls with their result layouts evaluated at `sizes`, passing them."""
    return [checks.CallToCheck(c.id, c.label, c.operands,
                               [(vid, [evaluate(v, sizes) for v in shape], [evaluate(v, sizes) for v in stride], dtype)
                                for vid, shape, stride, dtype in c.results], tuple(sizes))
            for c in planned.calls]


def check_at_assignments(planned: Any, graph_module: torch.fx.GraphModule, binding: SymbolBinding,
                         examples: list, tolerances: dict, device: torch.device) -> checks.Verdict:
    """checks.check at every assignment; the verdict keeps the worst error per output and the
    first failure, naming the sizes it showed at."""
    verdict = checks.Verdict()
    for label, sizes, values in examples:
        got = checks.check(planned.lifted, graph_module, planned.values, calls_at(planned, sizes),
                           list(planned.outputs), tolerances, device, seed=planned.seed,
                           examples=values, derived=planned.derived)
        for vid, (rel_err, tolerance) in got.errors.items():
            if vid not in verdict.errors or rel_err > verdict.errors[vid][0]:
                verdict.errors[vid] = [rel_err, tolerance]
        if got.failure:
            verdict.failure = f"at {binding.describe(sizes)} ({label}): {got.failure}"
            return verdict
    return verdict


def nodes_to_keep(candidates: list) -> set:
    """Every node a replacement's check reads (its lifted inputs and its calls' operands): at
    other sizes than the example's, each needs its value there."""
    return {node for p in candidates for node in [*p.lifted.inputs, *p.values.values()]
            if node.op != "get_attr"}
