"""`fact.optimize(module, example_inputs, precision=...)`: the module with the subgraphs the
engine planned replaced by `fact::launch` calls (docs/compose.md, docs/plan.md).

Two halves, so a saved plan can be applied again without the engine:

- `plan(...)` (needs the engine library): capture the module as graph JSON and call the
  engine in process (`fact_engine_plan`, include/fact/engine/c_api.h), which discovers,
  realizes (and tunes, when asked) and writes `plan.json` (schema fact.plan/2) into the work
  folder.
- `apply_plan(...)` (no engine): export the module (or take the program the plan was made
  from: `exported=`, as `optimize` and `fact optimize` do), map the plan's value ids to FX nodes,
  check each planned replacement against the graph, register its calls, verify it against the
  subgraph it replaces (fact.verify), leave to PyTorch the ones slower than the subgraph they
  replace (fact.replacement_speed), insert one `fact::launch` per call, compile the PyTorch
  remainder, and make sure the result is never slower than `torch.compile` of the original.

The plan is the one description of every replacement: nothing here knows a problem kind, an
epilogue, a layout or a limit. `optimize` is `plan` followed by `apply_plan`. The result is a
`ComposedModule`: for inputs with the planned signature (shapes, dtypes, devices, strides) it
runs the composed graph (or, where that is not faster, the compiled original), for anything
else the original module (with a one-line warning, once per signature). Whatever is not
composed is left to PyTorch and listed, with the reason, in `.fact_report`; optimize never
raises for a module that runs.
"""
from __future__ import annotations

# The package's parts, along the pipeline:
#   signature.py      the planned signature of the inputs (guards)
#   module.py         ComposedModule, ReplacedSubgraph, the CUDA graph runner
#   inputs.py         example inputs, pattern selections, the one torch.export
#   plan_file.py      the plan document (load_plan, replacement_label)
#   resolve.py        a planned replacement mapped onto the exported graph and checked
#   rewrite.py        fact::launch calls inserted, derived operands registered
#   guards.py         the remainder, CUDA graphs, never slower than doing nothing
#   apply.py          apply_plan (no engine)
#   planning.py       plan (engine, in process)
#   optimize_module.py  optimize = plan + apply_plan
#   training.py       composing for training: AOTAutograd's forward and backward compilers
#   training_module.py  optimize's training path, TrainingComposedModule
#   training_ranges.py  an AOT graph with symbolic sizes planned over declared ranges
#   training_over_ranges.py  optimize's training path over declared ranges (TorchDynamo + AOT)
from fact import _engine  # noqa: F401  (tests patch fact.compose._engine.engine_library)
from fact.compose.apply import REMAINDERS, apply_plan
from fact.compose.guards import SLOWER_BY, _replacement_timer  # noqa: F401
from fact.compose.inputs import _export  # noqa: F401
from fact.compose.module import ComposedModule, ReplacedSubgraph
from fact.compose.optimize_module import optimize
from fact.compose.plan_file import PLAN_FILE, PLAN_SCHEMA, USABLE_KERNEL_STATUSES, load_plan, replacement_label
from fact.compose.planning import engine_can_plan, plan, plan_and_export
from fact.compose.rewrite import _dense_order, _pin_layout  # noqa: F401
from fact.report import ComposedCall, ComposedReplacement, FactReport, LeftToPyTorch  # noqa: F401

__all__ = ["PLAN_FILE", "PLAN_SCHEMA", "PRECISIONS", "REMAINDERS", "SLOWER_BY", "USABLE_KERNEL_STATUSES",
           "ComposedCall", "ComposedModule", "ComposedReplacement", "FactReport", "LeftToPyTorch",
           "ReplacedSubgraph", "apply_plan", "engine_can_plan", "load_plan", "optimize", "plan", "plan_and_export",
           "replacement_label"]


def __getattr__(name: str):
    """PRECISIONS, the precision modes' names, from the engine's table (fact_engine_tables), read
    when first asked for so that importing fact.compose needs no engine library."""
    if name == "PRECISIONS":
        from fact import engine_tables
        return engine_tables.precisions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
