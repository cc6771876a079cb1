"""The composition report (`ComposedModule.fact_report`): what was composed, what was left to
PyTorch and why, and what runs. Everything in it is copied from the plan (docs/plan.md) or
measured by fact.compose; nothing is re-derived."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional


@dataclass
class ComposedCall:
    label: str
    kind: str
    summary: str             # the plan's summary (for people; never parsed)
    config: str = ""
    config_source: str = ""
    kernel: str = ""         # the kernel library's name in the plan ("" on the CPU path)
    tolerance: Optional[float] = None


@dataclass
class ComposedReplacement:
    id: int
    label: str
    rule: str
    pattern: str
    nodes: list[str]
    implementation: str      # "kernels" (CUDA) or "host reference" (CPU)
    calls: list[ComposedCall] = field(default_factory=list)
    rel_err: Optional[float] = None      # the largest over the outputs, measured here
    tolerance: Optional[float] = None    # that output's tolerance
    errors: dict = field(default_factory=dict)  # output value -> [rel_err, tolerance]
    verified: bool = False
    derived: list[str] = field(default_factory=list)  # "<value>: <purpose>" per derived operand
    calls_ms: Optional[float] = None     # its calls, timed against the subgraph it replaces
    subgraph_ms: Optional[float] = None  # that subgraph run eagerly by PyTorch (fact.replacement_speed)
    # under an Inductor remainder, when the calls were slower than eager's subgraph: the
    # subgraph compiled by Inductor, the baseline that decided (calls_ms is that timing's)
    compiled_subgraph_ms: Optional[float] = None
    timing: str = ""                     # how both were timed ("" when not timed)
    note: str = ""                       # the plan's note on how it runs (e.g. "K padded 770→776")


@dataclass
class LeftToPyTorch:
    what: str      # "<label> <rule> at <nodes>" or "module"
    reason: str
    replacement: Optional[int] = None  # the plan's replacement id
    stage: str = ""   # plan | selection | check | verify | speed | module | random
    subgraph_ms: Optional[float] = None  # PyTorch's own run of the subgraph, when it was timed


@dataclass
class FactReport:
    precision: str
    device: str
    capture: str = ""
    composed: list[ComposedReplacement] = field(default_factory=list)
    left_to_pytorch: list[LeftToPyTorch] = field(default_factory=list)
    work_dir: str = ""
    remainder: str = "eager"      # how the PyTorch remainder runs, with a fallback's reason
    cuda_graphs: str = "off"      # "on" or "off", with the reason when asked for but off
    op_implementation: str = ""   # which implementation of fact::launch runs
    runs: str = ""                # what runs for the planned signature, and why
    speed: Optional[dict] = None  # the never-slower check: composed_ms, compiled_original_ms, ...
    notes: list[str] = field(default_factory=list)
    symbols: list = field(default_factory=list)   # a plan over declared ranges: its symbols
    buckets: list = field(default_factory=list)   # per bucket tuple: sizes, times, what runs it
    # seconds spent per stage of optimizing (plan, verify, remainder compile, ...), in order
    stage_seconds: dict = field(default_factory=dict)
    # Training (docs/compose.md, "Training"): the graph a report is for ("forward" or
    # "backward" of AOTAutograd; "" for an inference module), and a trainable module's report
    # holds one report per graph.
    graph: str = ""
    forward: Optional["FactReport"] = None
    backward: Optional["FactReport"] = None

    def add_time(self, stage: str, seconds: float) -> None:
        self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + max(0.0, seconds)

    def leave(self, what: str, reason: str, replacement: Optional[int] = None,
              stage: str = "", subgraph_ms: Optional[float] = None) -> None:
        self.left_to_pytorch.append(LeftToPyTorch(what, reason, replacement, stage, subgraph_ms))

    def to_json(self) -> dict:
        return {
            "precision": self.precision,
            "device": self.device,
            "capture": self.capture,
            "work_dir": self.work_dir,
            "remainder": self.remainder,
            "cuda_graphs": self.cuda_graphs,
            "op_implementation": self.op_implementation,
            "runs": self.runs,
            "speed": self.speed,
            "composed": [asdict(c) for c in self.composed],
            "left_to_pytorch": [asdict(item) for item in self.left_to_pytorch],
            "notes": list(self.notes),
            **({"symbols": list(self.symbols)} if self.symbols else {}),
            **({"buckets": list(self.buckets)} if self.buckets else {}),
            **({"stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()}}
               if self.stage_seconds else {}),
            **({"graph": self.graph} if self.graph else {}),
            **({"forward": self.forward.to_json()} if self.forward is not None else {}),
            **({"backward": self.backward.to_json()} if self.backward is not None else {}),
        }

    def __str__(self) -> str:
        graphs = [(name, graph) for name, graph in (("forward", self.forward), ("backward", self.backward))
                  if graph is not None]
        counted = (", ".join(f"{len(graph.composed)} replacement(s) composed in the {name} graph"
                             for name, graph in graphs) + ", ") if graphs else ""
        lines = [f"FACT composition ({self.precision}, {self.device}"
                 + (f", {self.graph} graph" if self.graph else "") + "): " + counted +
                 ("" if graphs else f"{len(self.composed)} replacement(s) composed, ") +
                 f"{len(self.left_to_pytorch)} item(s) left to PyTorch; remainder {self.remainder}, "
                 f"CUDA graphs {self.cuda_graphs}"
                 + (f"; fact::launch: {self.op_implementation}" if self.op_implementation else "")]
        if self.runs:
            lines.append(f"  runs: {self.runs}")
        if self.stage_seconds:
            lines.append("  time to optimize: " + ", ".join(
                f"{stage} {seconds:.1f} s" for stage, seconds in self.stage_seconds.items()))
        if self.symbols:
            lines.append("  declared ranges: " + ", ".join(
                f"{s['name']}={s['min']}..{s['max']}" + (f":{s['multiple']}" if s.get("multiple", 1) > 1 else "")
                for s in self.symbols))
        for bucket in self.buckets:
            times = ", ".join(f"{name} {bucket[key]:.4g} ms" for key, name in
                              [("composed_ms", "composed"), ("compiled_ms", "torch.compile"), ("eager_ms", "eager")]
                              if bucket.get(key) is not None)
            lines.append(f"  bucket {bucket['sizes']}: runs {bucket['runs']}" + (f" ({times})" if times else ""))
        for c in self.composed:
            check = (f"rel_err {c.rel_err:.2e} (tol {c.tolerance:.0e})"
                     if c.rel_err is not None and c.tolerance is not None else "not verified")
            timed = (f", calls {c.calls_ms:.4g} ms vs subgraph {c.subgraph_ms:.4g} ms"
                     if c.calls_ms is not None and c.subgraph_ms is not None else "")
            if c.compiled_subgraph_ms is not None:
                timed += f" eager, {c.compiled_subgraph_ms:.4g} ms compiled by Inductor"
            lines.append(f"  composed {c.label} {c.rule} ({c.implementation}, {check}{timed}):")
            for call in c.calls:
                config = f" [{call.config} ({call.config_source})]" if call.config else ""
                lines.append(f"    {call.label}: {call.summary}{config}")
            if c.note:
                lines.append(f"    {c.note}")
            for derived in c.derived:
                lines.append(f"    operand {derived} (computed once from the weights)")
        for item in self.left_to_pytorch:
            lines.append(f"  left to PyTorch: {item.what}: {item.reason}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        for name, graph in graphs:
            lines.append(f"  {name} graph: " + str(graph).replace("\n", "\n    "))
        return "\n".join(lines)
