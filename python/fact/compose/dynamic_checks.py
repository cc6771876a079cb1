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


class SizedExamples:
    """The graph's values at each verification assignment (SymbolBinding.assignments), made on
    first use from fresh module inputs at those sizes and kept for every replacement's check.

    An assignment whose run (here, or a replacement's float64 reference) does not fit in memory
    is checked at smaller ones instead (`fallbacks`): each symbol alone at its maximum with the
    others at their hint, halved toward the hint until it fits. `notes` says what was checked
    instead of what, for the report."""

    def __init__(self, graph_module: torch.fx.GraphModule, binding: SymbolBinding,
                 example_inputs: tuple, nodes: set, on_gpu: bool):
        self.graph_module, self.binding = graph_module, binding
        self.example_inputs, self.nodes = example_inputs, nodes
        self.points = binding.assignments(on_gpu)
        self._values: dict[tuple, dict] = {}
        self.notes: list[str] = []

    def values(self, sizes: tuple) -> dict:
        """node -> its value at `sizes` (raises what the run raises, out of memory included)."""
        if sizes not in self._values:
            inputs = self.binding.inputs_at(sizes, self.example_inputs, seed=5000 + len(self._values))
            self._values[sizes] = checks.example_values(self.graph_module, inputs, self.nodes)
        return self._values[sizes]

    def drop(self, sizes: tuple) -> None:
        """Forgets the values at `sizes` (they did not fit beside a check) and frees the cache."""
        self._values.pop(sizes, None)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def fallbacks(self, sizes: tuple) -> list[list[tuple[str, tuple]]]:
        """Per symbol above its hint in `sizes`: smaller assignments to check instead, that
        symbol at its size in `sizes`, then halved toward its hint, the others at their hint."""
        hint = self.binding.hint
        chains = []
        for index, (name, size) in enumerate(zip(self.binding.names, sizes)):
            multiple = int(self.binding.symbols[index].get("multiple", 1) or 1)
            chain, value = [], size
            while value > hint[index]:
                point = tuple(value if i == index else h for i, h in enumerate(hint))
                if point != sizes:
                    chain.append((f"{name}={value}, the others at their hint", point))
                value = max(hint[index], value // 2 // multiple * multiple)
            if chain:
                chains.append(chain)
        return chains


def calls_at(planned: Any, sizes: Sequence[int]) -> list[checks.CallToCheck]:
    """The replacement's calls with their result layouts evaluated at `sizes`, passing them."""
    return [checks.CallToCheck(c.id, c.label, c.operands,
                               [(vid, [evaluate(v, sizes) for v in shape], [evaluate(v, sizes) for v in stride], dtype)
                                for vid, shape, stride, dtype, *_ in c.results], tuple(sizes))
            for c in planned.calls]


def _check_at(planned: Any, examples: SizedExamples, sizes: tuple, tolerances: dict,
              device: torch.device) -> checks.Verdict:
    """checks.check at one assignment; out_of_memory set when the values or the reference did
    not fit."""
    try:
        values = examples.values(sizes)
    except Exception as error:  # noqa: BLE001 - reported as the verdict
        if not checks.is_out_of_memory(error):
            raise
        examples.drop(sizes)
        return checks.Verdict(f"the graph does not run at these sizes ({error})", out_of_memory=True)
    return checks.check(planned.lifted, examples.graph_module, planned.values, calls_at(planned, sizes),
                        list(planned.outputs), tolerances, device, seed=planned.seed,
                        examples=values, derived=planned.derived)


def check_at_assignments(planned: Any, examples: SizedExamples, tolerances: dict,
                         device: torch.device) -> checks.Verdict:
    """checks.check at every assignment; the verdict keeps the worst error per output and the
    first failure, naming the sizes it showed at. An assignment that does not fit in memory is
    checked at examples.fallbacks instead (per symbol, the largest that fits), with a note."""
    verdict = checks.Verdict()
    for label, sizes in examples.points:
        failure = _check_or_smaller(planned, examples, label, sizes, tolerances, device, verdict)
        if failure:
            verdict.failure = failure
            return verdict
    return verdict


def _check_or_smaller(planned: Any, examples: SizedExamples, label: str, sizes: tuple,
                      tolerances: dict, device: torch.device, verdict: checks.Verdict) -> str:
    """Checks one assignment (or its fallbacks when it does not fit), merging the errors into
    `verdict`; the failure ("" when it passes)."""
    describe = examples.binding.describe
    got = _check_at(planned, examples, sizes, tolerances, device)
    if not got.out_of_memory:
        _merge(verdict, got)
        return f"at {describe(sizes)} ({label}): {got.failure}" if got.failure else ""
    examples.drop(sizes)
    chains = examples.fallbacks(sizes)
    if not chains:
        _note(examples, f"{describe(sizes)} ({label}) was not checked: it does not fit in memory "
                        f"for the float64 check, and no smaller size above the hint is left")
        return ""
    _note(examples, f"{describe(sizes)} ({label}) does not fit in memory for the float64 check; "
                    f"each symbol was checked alone at the largest size that fits")
    for chain in chains:
        for smaller_label, smaller in chain:
            got = _check_at(planned, examples, smaller, tolerances, device)
            if got.out_of_memory:
                examples.drop(smaller)
                continue
            _merge(verdict, got)
            if got.failure:
                return f"at {describe(smaller)} ({smaller_label}): {got.failure}"
            if smaller != chain[0][1]:
                _note(examples, f"checked at {describe(smaller)} ({smaller_label}): larger sizes "
                                f"do not fit in memory for the float64 check")
            break
        else:
            _note(examples, f"{chain[0][0].split('=')[0]} was not checked above its hint: no size "
                            f"above it fits in memory for the float64 check")
    return ""


def _merge(verdict: checks.Verdict, got: checks.Verdict) -> None:
    for vid, (rel_err, tolerance) in got.errors.items():
        if vid not in verdict.errors or rel_err > verdict.errors[vid][0]:
            verdict.errors[vid] = [rel_err, tolerance]


def _note(examples: SizedExamples, text: str) -> None:
    if text not in examples.notes:
        examples.notes.append(text)


def nodes_to_keep(candidates: list) -> set:
    """Every node a replacement's check reads (its lifted inputs and its calls' operands): at
    other sizes than the example's, each needs its value there."""
    return {node for p in candidates for node in [*p.lifted.inputs, *p.values.values()]
            if node.op != "get_attr"}
