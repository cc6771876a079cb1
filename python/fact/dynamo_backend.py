"""`torch.compile(model, backend="fact")`: fact.optimize on each graph dynamo captures.

    torch.compile(model, backend="fact")          # precision: the engine's choice from the dtype
    torch.compile(model, backend="fact", options={"precision": "tf32", "work_dir": "out/"})

Each dynamo graph (parameters arrive as graph inputs) is exported, discovered, realized and
rewritten like a module given to fact.optimize; the rest of the graph runs eagerly (option
"remainder": "inductor" compiles it; "patterns", "tune" and "verify" are passed on too). A graph that
cannot be composed runs as dynamo captured it. The never-slower check (fact.optimize's
speed_guard) is off inside the backend: it would compile the graph again from inside a
compilation. The reports of every graph compiled by the
backend are kept in `fact.dynamo_backend.reports` (newest last).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch._dynamo.backends.registry import register_backend

from fact.compose import ComposedModule, FactReport, optimize

reports: list[FactReport] = []

OPTIONS = ("precision", "work_dir", "remainder", "patterns", "tune", "verify")


@register_backend(name="fact")
def fact_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: dict | None = None, mode: str | None = None) -> ComposedModule:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"backend 'fact': unknown option(s) {', '.join(unknown)} "
                         f"(known: {', '.join(OPTIONS)})")
    composed = optimize(graph_module, tuple(example_inputs),
                        precision=options.get("precision"),
                        work_dir=options.get("work_dir"),
                        remainder=options.get("remainder", "eager"),
                        patterns=options.get("patterns"), tune=int(options.get("tune", 0)),
                        verify=bool(options.get("verify", True)), speed_guard=False)
    reports.append(composed.fact_report)
    return composed
