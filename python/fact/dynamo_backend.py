"""`torch.compile(model, backend="fact")`: fact.optimize on each graph dynamo captures.

    torch.compile(model, backend="fact")                                   # precision strict
    torch.compile(model, backend="fact", options={"precision": "tf32", "work_dir": "out/"})

Each dynamo graph (parameters arrive as graph inputs) is exported, discovered, realized and
rewritten like a module given to fact.optimize; the rest of the graph runs eagerly. A graph that
cannot be composed runs as dynamo captured it. The reports of every graph compiled by the
backend are kept in `fact.dynamo_backend.reports` (newest last).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch._dynamo.backends.registry import register_backend

from fact.compose import ComposedModule, FactReport, optimize

reports: list[FactReport] = []

OPTIONS = ("precision", "work_dir")


@register_backend(name="fact")
def fact_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: dict | None = None, mode: str | None = None) -> ComposedModule:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"backend 'fact': unknown option(s) {', '.join(unknown)} "
                         f"(known: {', '.join(OPTIONS)})")
    composed = optimize(graph_module, tuple(example_inputs),
                        precision=options.get("precision", "strict"),
                        work_dir=options.get("work_dir"))
    reports.append(composed.fact_report)
    return composed
