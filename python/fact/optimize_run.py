"""`fact optimize`'s pipeline in one process (`python -m fact.optimize_run`; the `fact optimize`
command parses the flags and runs this as its one child, with the same flags).

    capture   the model file's module built once (weights from seed 0) and exported once
              (torch.export); the graph document stays in memory (graph.json is written for
              the reader)
    agent     (--agent) an LLM writes kernels for the NEW matches (fact.agent.synthesize)
    plan      the engine in process (libfact's fact_optimize_plan_output, the graph passed as
              JSON text): discover, tune (GPU; one `fact run-kernel` child per candidate),
              realize, <out>/plan/plan.json. Its lines are shown as the engine writes them: the
              discovery table (what will be built, and why) before anything is compiled, the
              kernels to compile, progress while compiling and tuning (a bar on a terminal,
              lines elsewhere), then the tuning, kernel and roofline tables
    package   the plan applied to the same exported program (fact.compose.apply_plan with
              exported=: no second export), every replacement verified against the subgraph it
              replaces, and the importable package written
    measure   (GPU) the plan composed on the same program as the package's load() composes it,
              checked against the model in float64 and timed against eager / torch.compile /
              max-autotune -> e2e.{md,json}
    report    report.md and report.json (libfact's fact_optimize_report), the plots and
              report.html (fact.plots), all from the documents in memory

FACT's lines go to the terminal and <out>/logs/optimize.log; each stage's third-party output
(torch.export, Inductor, compilers, warnings) to <out>/logs/<stage>.log (-v: the terminal too).
Exit status 0, or 1 with one `fact: error: ...` line (the capture failed, a kernel did not
compile, no package was written, the engine refused the request).
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from fact.console import RunLog, verbose_from_environment
from fact.model_file import dtype_spellings

class OptimizeFailed(Exception):
    """The run cannot go on, or ended without what it promises; the message is the one line."""


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fact.optimize_run",
                                     description="fact optimize's pipeline in one process (see `fact optimize --help`)")
    parser.add_argument("model", help="path/to/model.py:ClassName")
    parser.add_argument("--dtype", default="float32", choices=sorted(dtype_spellings()))
    parser.add_argument("--precision", default="", choices=["", "strict", "tf32", "native"])
    parser.add_argument("-o", "--out", default="out/optimize")
    parser.add_argument("--space", default="default", choices=["default", "exhaustive"])
    parser.add_argument("--max-candidates", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=0)
    parser.add_argument("--no-tune", action="store_true")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--patterns", default="")
    parser.add_argument("--package-name", default="")
    parser.add_argument("--dynamic", default="", help="declared ranges: NAME=MIN..MAX[:MULTIPLE][@T1/T2],...")
    parser.add_argument("--dims", action="append", default=[], help="INPUT:DIM,DIM,... (repeatable)")
    parser.add_argument("--no-measure", action="store_true")
    parser.add_argument("--no-max-autotune", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--agent", action="store_true")
    parser.add_argument("--agent-endpoint", default="")
    parser.add_argument("--agent-model", default="")
    parser.add_argument("--agent-attempts", type=int, default=0)
    parser.add_argument("--agent-max-tokens", type=int, default=0)
    parser.add_argument("--agent-seconds", type=float, default=0.0)
    args = parser.parse_args(None if argv is None else list(argv))
    args.dtype = dtype_spellings()[args.dtype]
    args.verbose = args.verbose or verbose_from_environment()
    return args


class RunOutput:
    """FACT's lines of the run: the terminal and <logs>/optimize.log; `detail` reaches the log
    always and the terminal with -v. While a stage's RunLog is open, lines go through it (its
    terminal is the one this process started with). `engine` takes the engine's lines as it
    writes them (fact_optimize_plan_output): lines, the status line a terminal redraws in place,
    and lines for the log only. Thread-safe: the engine writes from its worker threads."""

    LINE, LIVE, LOG = 0, 1, 2  # c_api.h's fact_output_fn kinds

    def __init__(self, logs: Path, verbose: bool):
        logs.mkdir(parents=True, exist_ok=True)
        self.log = open(logs / "optimize.log", "a", encoding="utf-8")
        self.verbose = verbose
        self.stage: RunLog | None = None
        self.terminal = sys.stdout.isatty()
        self._live = False  # a status line is on the terminal (no newline after it)
        self._lock = threading.RLock()

    def columns(self) -> int:
        return shutil.get_terminal_size((100, 24)).columns

    def say(self, text: str = "") -> None:
        text = text.rstrip("\n")
        with self._lock:
            self._clear_live()
            if self.stage is not None:
                self.stage.say(text)  # which logs it here too (the stage's mirror)
                return
            print(text, flush=True)
            self.log_line(text)

    def log_line(self, text: str) -> None:
        """A line for optimize.log only (a stage's RunLog mirrors its lines here)."""
        with self._lock:
            self.log.write(text.rstrip("\n") + "\n")
            self.log.flush()

    def engine(self, kind: int, text: str) -> None:
        """One of the engine's lines (c_api.h's fact_output_fn)."""
        with self._lock:
            if kind == self.LIVE:
                if self.terminal and self.stage is None:
                    sys.stdout.write("\r\033[2K" + text)
                    sys.stdout.flush()
                    self._live = bool(text)
            elif kind == self.LOG:
                self.log_line(text)
            else:
                self.say(text)

    def _clear_live(self) -> None:
        if self._live:
            sys.stdout.write("\r\033[2K")
            sys.stdout.flush()
            self._live = False

    def detail(self, text: str) -> None:
        if not text.strip():
            return
        if self.verbose:
            self.say(text)
        else:
            self.log_line(text)

    def close(self) -> None:
        self.log.close()


@dataclass
class Captured:
    model: Any
    inputs: tuple
    document: dict                     # the graph (docs/graph_json.md)
    exported: Any                      # the torch.export program the document was written from
    device: str


@dataclass
class Package:
    written: bool = False
    path: Path | None = None
    note: str = ""
    composed_report: Any = None


@dataclass
class Run:
    args: argparse.Namespace
    out: Path
    output: RunOutput
    skipped: list = field(default_factory=list)   # the Python stages' own, with the reason

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    def stage_log(self, name: str, title: str) -> RunLog:
        """The stage's third-party output into <logs>/<name>.log while it runs; FACT's lines of
        the stage (its progress steps too) also into optimize.log."""
        return RunLog(self.logs / f"{name}.log", verbose=self.args.verbose, title=title,
                      mirror=self.output.log_line)


def _first_line(error: BaseException) -> str:
    return (f"{type(error).__name__}: {error}".strip().splitlines() or [""])[0]


def capture_stage(run: Run, device: str) -> Captured:
    """Builds the model (seed 0) on the device the package runs on and exports it once. On that
    device, not on meta: meta kernels give some ops other output strides, so the graph would not
    be the one the package rewrites."""
    import torch

    from fact.graph_capture import capture_exported
    from fact.graph_writer import write_graph
    from fact.model_file import build_from_model_file

    run.output.say("\n== capture")
    with run.stage_log("capture", "fact.capture") as log:
        run.output.stage = log
        try:
            torch.manual_seed(0)
            model, inputs = build_from_model_file(run.args.model, run.args.dtype, device)
            dynamic_shapes = declared_dynamic_shapes(run.args, model, inputs)
            document, exported = capture_exported(model, inputs, dynamic_shapes=dynamic_shapes)
        except OptimizeFailed:
            raise
        except Exception as error:  # noqa: BLE001 - the one line, the traceback in the log
            log.failed(error)
            raise OptimizeFailed(f"capture of {run.args.model} failed ({_first_line(error)}); see "
                                 f"{run.logs / 'capture.log'}") from None
        finally:
            run.output.stage = None
    write_graph(document, run.out / "graph.json")
    if dtype_did_not_apply(run.args.dtype, model, inputs):
        note = (f"--dtype {run.args.dtype} did not apply: the model has no floating-point parameters, "
                f"buffers or inputs (it runs in its own dtypes)")
        run.output.say(f"note: {note}")
        run.skipped.append(note)
    run.output.say(f"captured {run.args.model}: {len(document['nodes'])} nodes, {len(document['values'])} values "
                   f"(capture: {document['source']['capture']}); {run.out / 'graph.json'}")
    for symbol in document.get("symbols", []):
        run.output.say(f"  dynamic {symbol['name']}: {symbol['min']}..{symbol['max']}"
                       + (f", multiple of {symbol['multiple']}" if symbol["multiple"] > 1 else "")
                       + f", hint {symbol['hint']}" + (f", typical {symbol['typical']}" if symbol["typical"] else ""))
    return Captured(model, tuple(inputs), document, exported, device)


def declared_dynamic_shapes(args: argparse.Namespace, model: Any, inputs: Sequence[Any]) -> Any:
    """torch.export's dynamic_shapes from --dynamic / --dims (fact.dynamic_ranges), or None;
    OptimizeFailed with the parser's message for a bad declaration."""
    if not args.dynamic:
        if args.dims:
            raise OptimizeFailed("--dims names dimensions of --dynamic ranges; give --dynamic too")
        return None
    from fact.dynamic_ranges import dynamic_shapes_from_spec
    try:
        return dynamic_shapes_from_spec(args.dynamic, args.dims, model, tuple(inputs))
    except ValueError as error:
        raise OptimizeFailed(str(error)) from None


def check_dynamic_spelling(args: argparse.Namespace) -> None:
    """--dynamic and --dims parse (before the model is built): OptimizeFailed otherwise."""
    from fact.dynamic_ranges import parse_dims, parse_ranges
    try:
        if args.dynamic:
            parse_ranges(args.dynamic)
        parse_dims(args.dims)
    except ValueError as error:
        raise OptimizeFailed(str(error)) from None


def dtype_did_not_apply(dtype: str, model: Any, inputs: Sequence[Any]) -> bool:
    """True when --dtype asked for another floating dtype than float32 (the default) and the
    model has no floating-point tensor for it to apply to."""
    import torch

    if dtype in ("float32", "fp32", "f32", "float"):
        return False
    tensors = [*model.parameters(), *model.buffers(),
               *(x for x in inputs if isinstance(x, torch.Tensor))]
    return not any(t.is_floating_point() for t in tensors)


def agent_stage(run: Run, device: str) -> None:
    """--agent: kernels for the NEW matches from an LLM, through the gates into the registry,
    from which the plan takes them (python/fact/agent/synthesize.py, in this process)."""
    from fact.agent import synthesize

    a = run.args
    argv = ["--graph", str(run.out / "graph.json"), "--model", a.model, "--dtype", a.dtype,
            "--arch", "host" if device == "cpu" else "sm_90a", "-o", str(run.out / "agent")]
    for flag, value in (("--precision", a.precision), ("--endpoint", a.agent_endpoint),
                        ("--llm-model", a.agent_model)):
        if value:
            argv += [flag, value]
    for flag, value in (("--attempts", a.agent_attempts), ("--max-tokens", a.agent_max_tokens),
                        ("--seconds", a.agent_seconds)):
        if value > 0:
            argv += [flag, str(value)]
    run.output.say("\n== agent")
    with run.stage_log("agent", "fact.agent.synthesize") as log:
        run.output.stage = log
        try:
            status = synthesize.main(argv, say=run.output.say)
        except Exception as error:  # noqa: BLE001 - the plan goes on without agent kernels
            log.failed(error)
            status = _first_line(error)
        finally:
            run.output.stage = None
    if status not in (0, None):
        run.skipped.append(f"agent: fact.agent.synthesize failed ({status})")


def plan_stage(run: Run, captured: Captured, gpu_unavailable: str | None) -> dict:
    """The engine in process: fact_optimize_plan with the graph as JSON text."""
    from fact import _engine
    from fact.compose.inputs import _input_specs

    a = run.args
    tune = 0 if a.no_tune or gpu_unavailable else (a.max_candidates if a.max_candidates > 0 else 1000000)
    request = {"graph_json": json.dumps(captured.document), "out_dir": str(run.out / "plan"),
               "report_dir": str(run.out), "model": a.model, "dtype": a.dtype, "precision": a.precision,
               "compile": not a.no_compile, "tune": tune, "no_tune_asked": a.no_tune, "space": a.space,
               "jobs": a.jobs, "device": captured.device, "inputs": _input_specs(captured.inputs),
               "patterns": [p for p in a.patterns.split(",") if p] or None,
               # The engine's lines as it writes them: the discovery table before any compile,
               # the kernels to build, then a bar on a terminal, progress lines elsewhere; all of
               # them into optimize.log.
               "progress": True, "terminal": run.output.terminal, "columns": run.output.columns()}
    run.output.say(f"\n== plan (engine: discover{', tune' if tune else ''}, realize)")
    code, response = _engine.engine_library().call_json_with_output("fact_optimize_plan_output", request,
                                                                    run.output.engine)
    if code != 0 or response.get("status") != "ok":
        raise OptimizeFailed(f"the engine made no plan: {response.get('error') or response}")
    run.output.detail(response.get("detail", ""))
    return response


def package_stage(run: Run, captured: Captured, plan: dict, compiled: bool) -> Package:
    """The plan applied to the program exported at capture, verified, written as a package."""
    from fact.package import default_package_name, package_plan

    a = run.args
    name = a.package_name or default_package_name(a.model.rpartition(":")[2])
    on_gpu = captured.device == "cuda"
    package = Package(path=run.out / name)
    run.output.say("\n== package")
    with run.stage_log("package", "fact.package") as log:
        run.output.stage = log
        try:
            package.path = package_plan(a.model, Path(plan["plan"]).parent, run.out, device=captured.device,
                                        dtype=a.dtype, name=name, model=captured.model, inputs=captured.inputs,
                                        exported=captured.exported, plan_document=plan["plan_document"],
                                        log=run.output.say,
                                        on_report=lambda report: setattr(package, "composed_report", report.to_json()))
        except Exception as error:  # noqa: BLE001 - the report says why; the status is 1
            log.failed(error)
            package.note = (f"not written: {_first_line(error)}; see the message above and "
                            f"{run.logs / 'package.log'}")
            return package
        finally:
            run.output.stage = None
    package.written = True
    planned = plan.get("plan_document", {}).get("replacements", [])
    package.note = (f"`{package.path}/`: `import {name}; {name}.load(device=...)` (see its README.md and "
                    f"report.json); " +
                    ("no kernels (no replacement was planned: nothing to compile)" if not planned
                     else "kernels compiled" if compiled else "kernels not compiled (--no-compile or no nvcc)") +
                    (", verified against float64 on this GPU" if on_gpu
                     else ", not verified (no GPU here; load() verifies them on the GPU)"))
    run.output.say(f"wrote package {package.path}")
    return package


def measure_stage(run: Run, captured: Captured, plan: dict, package: Package) -> tuple[str, dict | None]:
    """(GPU) e2e.{md,json}: the plan composed on the exported program as the package's load()
    composes it (Inductor remainder, speed guards, every replacement verified again; the same
    kernel libraries the package copied), against the model in float64 and the torch baselines."""
    from fact.compose import apply_plan
    from fact.measure import measure_composed, render_markdown

    run.output.say("\n== end to end")
    with run.stage_log("measure", "fact.measure") as log:
        run.output.stage = log
        try:
            composed = apply_plan(captured.model, captured.inputs, Path(plan["plan"]).parent,
                                  exported=captured.exported, plan_document=plan["plan_document"])
            package.composed_report = composed.fact_report.to_json()  # with the speed checks
            doc = measure_composed(package.path.name, captured.model, captured.inputs, composed,
                                   max_autotune=not run.args.no_max_autotune, log=run.output.say,
                                   progress=log.step)
        except Exception as error:  # noqa: BLE001 - reported in the report, not fatal
            log.failed(error)
            return (f"End-to-end measurement failed ({_first_line(error)}); see "
                    f"{run.logs / 'measure.log'}.\n", None)
        finally:
            run.output.stage = None
    (run.out / "e2e.json").write_text(json.dumps(doc, indent=2) + "\n")
    table = render_markdown(doc)
    (run.out / "e2e.md").write_text(table)
    run.output.say("\n" + table)
    return table, doc


def report_stage(run: Run, package: Package, end_to_end: str, e2e: dict | None) -> None:
    """report.md + report.json (the engine, from what the plan stage kept), then the plots and
    report.html (fact.plots) from the same documents."""
    from fact import _engine
    from fact.plots import PLOTS_HEADING, write_report_plots

    run.output.say("\n== report")
    request = {"out_dir": str(run.out), "end_to_end": end_to_end, "skipped": run.skipped,
               "package": {"written": package.written, "path": str(package.path or ""), "note": package.note},
               "left_to_pytorch": (package.composed_report or {}).get("left_to_pytorch", [])}
    eager_ms = (((e2e or {}).get("cases") or [{}])[0].get("baselines") or {}).get("torch_eager", {}).get("ms")
    if eager_ms:
        request["model_ms"] = eager_ms
    code, response = _engine.engine_library().call_json("fact_optimize_report", request)
    if code != 0 or response.get("status") != "ok":
        raise OptimizeFailed(f"the engine wrote no report: {response.get('error') or response}")
    run.skipped = response["skipped"]
    with run.stage_log("plots", "fact.plots") as log:
        run.output.stage = log
        try:
            write_report_plots(run.out, log=run.output.say, report=response["document"], e2e=e2e)
        except Exception as error:  # noqa: BLE001 - the report stands without its plots
            log.failed(error)
            why = f"fact.plots failed ({_first_line(error)}); see {run.logs / 'plots.log'}"
            with open(run.out / "report.md", "a") as markdown:
                markdown.write(f"\n{PLOTS_HEADING}\n\nNot drawn: {why}\n")
            run.output.say(f"plots: {why}")
        finally:
            run.output.stage = None


def optimize(run: Run) -> int:
    import torch

    from fact import _engine

    started = time.monotonic()
    a = run.args
    run.output.say(f"fact optimize {a.model} ({a.dtype}) -> {run.out}/\nthird-party output (torch.export, Inductor, "
                   f"compilers, warnings): {run.logs}/" + ("" if a.verbose else "  (-v shows it here too)"))
    run.output.detail("$ " + shlex.join([sys.executable, "-m", "fact.optimize_run", *sys.argv[1:]]))
    device_info = _engine.engine_library().call_json("fact_engine_device", {})[1]
    gpu_unavailable = device_info.get("gpu_unavailable") if device_info.get("status") == "ok" else \
        device_info.get("error", "the engine cannot tell")
    if not gpu_unavailable and not torch.cuda.is_available():
        gpu_unavailable = "torch sees no CUDA device"
    device = "cpu" if gpu_unavailable else "cuda"

    captured = capture_stage(run, device)
    if a.agent:
        agent_stage(run, device)
    plan = plan_stage(run, captured, gpu_unavailable)
    package = package_stage(run, captured, plan, plan["compiled"])
    if gpu_unavailable:
        run.skipped.append(f"verification of the packaged kernels on the GPU: {gpu_unavailable} "
                           f"(replacements were verified on the CPU with the host reference)")
    end_to_end, e2e = "", None
    if gpu_unavailable:
        run.skipped.append(f"end-to-end verification and timing against eager / torch.compile: {gpu_unavailable}")
    elif not package.written:
        run.skipped.append("end-to-end verification and timing: no package")
    elif a.no_measure:
        run.skipped.append("end-to-end verification and timing: --no-measure was given")
    else:
        end_to_end, e2e = measure_stage(run, captured, plan, package)
    report_stage(run, package, end_to_end, e2e)

    run.output.say("\n== skipped" + ("" if run.skipped else ": nothing (every stage ran)"))
    for reason in run.skipped:
        run.output.say(f"  - {reason}")
    run.output.say(f"\npackage: {package.note}")
    html = run.out / "report.html"
    run.output.say(f"\nwrote {run.out / 'report.md'}" + (f" and {html}" if html.exists() else "") +
                   f" ({time.monotonic() - started:.0f} s); logs: {run.logs}/")
    if plan["failed_kernels"]:
        raise OptimizeFailed(f"{plan['failed_kernels']} kernel(s) could not be compiled; see the table above")
    if not package.written:
        raise OptimizeFailed(f"the package was {package.note}")
    return 0


# What a run writes at the top of its output folder (besides its package, fact_<name>/).
PREVIOUS_OUTPUTS = ("report.md", "report.html", "report.json", "e2e.md", "e2e.json", "graph.json",
                    "roofline.png", "e2e_speedup.png", "kernel_speedup.png", "tuning_scatter.png",
                    "plan", "agent", "logs")


def clear_previous_outputs(out: Path) -> list[str]:
    """Removes what an earlier `fact optimize` wrote into `out` (its reports, plots, graph, plan,
    logs and package), so that a reused folder holds this run's outputs only; returns the names
    removed. A folder is taken for a package only when its __init__.py says FACT wrote it."""
    import shutil

    removed = []
    packages = [p for p in out.glob("fact_*") if p.is_dir() and (p / "__init__.py").is_file()
                and "fact.package" in (p / "__init__.py").read_text(errors="replace")]
    for path in [out / name for name in PREVIOUS_OUTPUTS] + packages:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        removed.append(path.name)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    out = Path(args.out)
    removed = clear_previous_outputs(out) if out.is_dir() else []
    out.mkdir(parents=True, exist_ok=True)
    output = RunOutput(out / "logs", args.verbose)  # a new optimize.log (an earlier one was removed)
    if removed:
        output.say(f"{out}/ held an earlier run's outputs; removed {', '.join(sorted(removed))}")
    run = Run(args, out, output)
    try:
        check_dynamic_spelling(args)
        return optimize(run)
    except OptimizeFailed as error:
        output.log.write(f"fact: error: {error}\n")
        print(f"fact: error: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        output.close()


if __name__ == "__main__":
    sys.exit(main())
