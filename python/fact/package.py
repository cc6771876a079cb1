"""The composed module as an importable Python package (`fact optimize` writes one).

    python -m fact.package --plan <plan dir> path/to/model.py:ClassName -o out/
        [--dtype float32|bfloat16|float16] [--device cuda|cpu] [--name fact_model] [--seed 0]

packages a plan the engine has already written (`fact optimize` calls `package_plan` in its one
process, python/fact/optimize_run.py, with the plan in memory and the program it exported);

    python -m fact.package path/to/model.py:ClassName -o out/ [--precision strict|tf32|native]
        [--dtype ...] [--device ...] [--compile|--no-compile] [--tune N] [--patterns a,b]
        [--name fact_model] [--work-dir out/plan] [--seed 0]

plans first (`fact.compose.plan`, the engine in process) and then packages the same way. Both
build the model file's module (get_init_inputs(), weights from `--seed`) and its example inputs
(get_inputs()), apply the plan once (every replacement verified against the subgraph it
replaces, on the device) and write

    <out>/<name>/__init__.py     load(device="cuda", **options) -> ComposedModule
                 plan.json       the plan: kernel library paths relative to the package;
                                 replacements that failed verification here marked "failed"
                 kernels/*.so    the kernel libraries the plan names
                 <model file>    a copy of the model file
                 state_dict.pt   the weights that were optimized
                 package.json    class, dtype, precision, where it was planned and verified
                 report.json     the composition report when it was written
                 README.md       how to use it

Importing the package needs `fact` (the Python front end) and torch, not the engine (on the
CPU, the host reference: $FACT_REFERENCE_LIBRARY or the engine library).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from fact.console import RunLog, default_log_path, verbose_from_environment
from fact.compose import PRECISIONS, ComposedModule, FactReport, apply_plan, load_plan, plan
from fact.graph_writer import CaptureError
from fact.model_file import dtype_spellings, build_from_model_file, load_model_file

PACKAGE_SCHEMA = "fact.package/2"

_INIT_TEMPLATE = '''"""{class_name} from {model_file}, composed by FACT (precision {precision}).

    import {name}
    model = {name}.load(device="cuda")      # ComposedModule; .fact_report says what runs where
    y = model(*{name}.example_inputs("cuda"))

See README.md. Needs the `fact` Python package and torch; not the FACT engine.
"""
from pathlib import Path as _Path

PACKAGE_DIR = _Path(__file__).resolve().parent


def load(device="cuda", **options):
    """The composed module on `device` with the optimized weights. Options: inputs (example
    inputs; default get_inputs()), remainder ("inductor" | "eager"; default inductor on a GPU,
    eager on the CPU), cuda_graphs, patterns,
    verify, speed_guard, replacement_guard (see fact.package.load_package)."""
    from fact.package import load_package

    return load_package(PACKAGE_DIR, device=device, **options)


def build_model(device="cpu"):
    """The original module with the optimized weights, and get_inputs()'s example inputs."""
    from fact.package import build_packaged_model

    return build_packaged_model(PACKAGE_DIR, device=device)


def example_inputs(device="cpu"):
    return build_model(device)[1]
'''


def default_package_name(class_name: str) -> str:
    return "fact_" + re.sub(r"\W", "_", class_name).lower()


def _packaged_plan(doc: dict, kernel_names: dict[str, str], report: FactReport | None) -> dict:
    """The plan as the package holds it: library paths inside the package, and replacements
    that failed verification (or could not run) when it was written marked "failed", so a
    package loaded with verify=False still leaves them to PyTorch."""
    packaged = json.loads(json.dumps(doc))
    for key, kernel in packaged.get("kernels", {}).items():
        if key in kernel_names:
            kernel["library"] = f"kernels/{kernel_names[key]}"
    failed = {item.replacement: item.reason for item in (report.left_to_pytorch if report else [])
              if item.stage == "verify" and item.replacement is not None}
    for replacement in packaged.get("replacements", []):
        if replacement.get("id") in failed and replacement.get("status") == "planned":
            replacement["status"] = "failed"
            replacement["reason"] = (f"rejected when packaged on {report.device}: "
                                     f"{failed[replacement['id']]}")
    return packaged


def write_package(out_dir: str | Path, model_file: str | Path, class_name: str,
                  plan_dir: str | Path, *, module: torch.nn.Module | None = None,
                  package_name: str | None = None, dtype: str | None = None,
                  report: FactReport | None = None, verified: bool = False,
                  plan_document: dict | None = None) -> Path:
    """Writes `<out_dir>/<package_name>/` (layout in the module docstring) and returns it.
    `module` supplies the weights (state_dict.pt); without it the package builds fresh
    weights from the model file. `report` is the composition report when the plan was applied
    here (replacements that failed verification then stay PyTorch in the package);
    `verified` says whether that happened on the device the kernels are for. Raises
    CaptureError when the model file lacks the class or get_inputs(), FileNotFoundError for a
    missing plan or kernel library."""
    model_file = Path(model_file)
    load_model_file(f"{model_file}:{class_name}")  # clear message for a bad model file
    doc, plan_folder = load_plan(plan_dir, plan_document)
    name = package_name or default_package_name(class_name)
    if not name.isidentifier():
        raise ValueError(f"package name '{name}' is not a Python identifier")
    target = Path(out_dir) / name
    if target.exists():
        shutil.rmtree(target)
    (target / "kernels").mkdir(parents=True)

    kernel_names: dict[str, str] = {}
    for key, kernel in (doc.get("kernels") or {}).items():
        library = kernel.get("library")
        if not library or kernel.get("status") not in ("built", "cached"):
            continue
        source = Path(library) if Path(library).is_absolute() else plan_folder / library
        if not source.is_file():
            raise FileNotFoundError(f"kernel library {source} of the plan does not exist")
        kernel_names[key] = f"{key[:16]}_{source.name}"
        shutil.copy2(source, target / "kernels" / kernel_names[key])
    (target / "plan.json").write_text(json.dumps(_packaged_plan(doc, kernel_names, report),
                                                 indent=2) + "\n")
    shutil.copy2(model_file, target / model_file.name)
    if module is not None:
        torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()},
                   target / "state_dict.pt")
    meta = {
        "schema": PACKAGE_SCHEMA, "class_name": class_name, "model_file": model_file.name,
        "dtype": dtype, "precision": doc.get("precision", ""), "planned_on": doc.get("device", ""),
        "compiled": bool(kernel_names), "verified": bool(verified),
        "weights": "state_dict.pt" if module is not None else None,
        "inputs": doc.get("inputs", []), "torch": torch.__version__.split("+")[0],
    }
    (target / "package.json").write_text(json.dumps(meta, indent=2) + "\n")
    if report is not None:
        (target / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (target / "__init__.py").write_text(_INIT_TEMPLATE.format(
        class_name=class_name, model_file=model_file.name, precision=meta["precision"], name=name))
    (target / "README.md").write_text(_readme(name, meta, report, len(kernel_names)))
    return target


def _readme(name: str, meta: dict, report: FactReport | None, kernel_count: int) -> str:
    state = ("each replacement verified on the GPU against the subgraph it replaces when it was "
             "written" if meta["verified"] else
             "compiled but NOT verified on a GPU (written without one); load(device='cuda') "
             "verifies each replacement on the GPU before using it" if meta["compiled"] else
             "not compiled (no kernel libraries): on a GPU every replacement stays PyTorch; on "
             "the CPU the calls run the host reference")
    lines = [
        f"# `{name}`: {meta['class_name']} composed by FACT",
        "",
        f"Precision mode **{meta['precision']}**, dtype {meta['dtype'] or 'as defined'}; "
        f"{kernel_count} kernel librar{'y' if kernel_count == 1 else 'ies'} in `kernels/`, "
        f"{state}.",
        "",
        "```python",
        "import sys; sys.path.insert(0, '<folder holding this package>')",
        f"import {name}",
        f"model = {name}.load(device='cuda')            # or device='cpu' (host reference)",
        f"x = {name}.example_inputs('cuda')             # get_inputs() of the model file",
        "y = model(*x)",
        "print(model.fact_report)                        # what runs where, and why",
        "```",
        "",
        "`load` options: `inputs=` (example inputs with the planned shapes and dtypes), "
        "`remainder='inductor'|'eager'` (the PyTorch rest of the graph), `cuda_graphs=True`, "
        "`patterns=` (compose only these rules/patterns), `verify=` (check each replacement "
        "against the subgraph it replaces first; default True), `speed_guard=` (fall back to "
        "torch.compile of the original where that is faster; default True), `replacement_guard=` "
        "(leave to PyTorch each replacement slower than the subgraph it replaces; default: as "
        "speed_guard).",
        "",
        "Inputs with other shapes, dtypes or strides run the original module (one warning per "
        "signature). Needs the `fact` Python package (the FACT front end) and torch; the "
        "kernels are built for sm_90a (Hopper).",
        "",
        "Files: `plan.json` (the composition plan), `kernels/` (kernel libraries), "
        f"`{meta['model_file']}` (the model file), `state_dict.pt` (weights), `package.json`, "
        "`report.json` (the report at optimize time).",
    ]
    if report is not None:
        lines += ["", "## Report at optimize time", "", "```", str(report), "```"]
    return "\n".join(lines) + "\n"


def build_packaged_model(package_dir: str | Path, device: str = "cpu"
                         ) -> tuple[torch.nn.Module, tuple]:
    """The packaged model file's module on `device` with the saved weights, and its example
    inputs (get_inputs())."""
    package_dir = Path(package_dir)
    meta = json.loads((package_dir / "package.json").read_text())
    spec = f"{package_dir / meta['model_file']}:{meta['class_name']}"
    model, inputs = build_from_model_file(spec, meta.get("dtype"), device)
    if meta.get("weights"):
        state = torch.load(package_dir / meta["weights"], map_location=device, weights_only=True)
        model.load_state_dict(state)
    return model.eval(), inputs


def load_package(package_dir: str | Path, device: str = "cuda", *,
                 inputs: Sequence[Any] | None = None, remainder: str | None = None,
                 cuda_graphs: bool | None = None, patterns: Iterable[str] | str | None = None,
                 verify: bool = True, speed_guard: bool = True,
                 replacement_guard: bool | None = None) -> ComposedModule:
    """The packaged module composed on `device` from the package's plan and kernel libraries
    (fact.compose.apply_plan; no engine). Whether a replacement is faster than the subgraph
    it replaces is decided here, on the device (replacement_guard), never at packaging.
    remainder None: "inductor" on a GPU, "eager" on the CPU (Inductor's CPU compile of the rest
    takes about a minute on every load and the host reference dominates there anyway)."""
    package_dir = Path(package_dir)
    if remainder is None:
        remainder = "eager" if str(device).startswith("cpu") else "inductor"
    model, example = build_packaged_model(package_dir, device)
    return apply_plan(model, tuple(inputs) if inputs is not None else example, package_dir,
                      remainder=remainder, cuda_graphs=cuda_graphs, patterns=patterns,
                      verify=verify, kernel_dir=package_dir, speed_guard=speed_guard,
                      replacement_guard=replacement_guard)


def package_plan(model_spec: str, plan_dir: str | Path, out: str | Path, *, device: str,
                 dtype: str | None = None, seed: int = 0, name: str | None = None,
                 patterns: Iterable[str] | None = None, model: torch.nn.Module | None = None,
                 inputs: Sequence[Any] | None = None, exported: torch.export.ExportedProgram | None = None,
                 plan_document: dict | None = None, log=print, on_report=None) -> Path:
    """Applies the plan in `plan_dir` to the model file's module once on `device` (verifying
    every replacement there) and writes the package; returns its folder. `exported`: the
    torch.export of `model` on `inputs` the plan was made from (apply_plan then exports nothing);
    `plan_document`: the plan in memory (plan.json in `plan_dir` is then not read);
    `on_report`: called with the composition report (fact.report.FactReport) before writing.
    Raises CaptureError
    (bad model file), FileNotFoundError (missing plan or kernel library), ValueError."""
    file_part, _, class_name = model_spec.rpartition(":")
    if model is None or inputs is None:
        torch.manual_seed(seed)
        model, inputs = build_from_model_file(model_spec, dtype, device)
    composed = apply_plan(model, inputs, plan_dir, remainder="eager", patterns=patterns,
                          speed_guard=False, exported=exported, plan_document=plan_document)
    report = composed.fact_report
    on_gpu = torch.device(device).type == "cuda"
    if not on_gpu:
        report.notes.append(f"written on {device}: the kernels were not run or verified here "
                            f"(no GPU); the replacements were checked with the host reference")
    log(str(report))
    if on_report is not None:
        on_report(report)
    return write_package(out, file_part, class_name, plan_dir, module=model, package_name=name,
                         dtype=dtype, report=report, verified=on_gpu, plan_document=plan_document)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.package",
                                     description="Write a model file's composition (a plan the "
                                                 "engine wrote, or one planned now) as an "
                                                 "importable Python package.")
    parser.add_argument("model", help="path/to/model.py:ClassName")
    parser.add_argument("-o", "--out", required=True, help="folder to write the package into")
    parser.add_argument("--plan", default=None,
                        help="package this plan folder (plan.json) instead of planning")
    parser.add_argument("--name", default=None, help="package name (default fact_<class>)")
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="when planning (default: the engine's choice from the dtype)")
    parser.add_argument("--dtype", choices=sorted(dtype_spellings()), default=None)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--compile", dest="compile_kernels", action="store_true", default=None,
                        help="when planning: compile the kernels (default: when the device is a GPU)")
    parser.add_argument("--no-compile", dest="compile_kernels", action="store_false")
    parser.add_argument("--tune", type=int, default=0,
                        help="when planning: tune over at most N configurations first (GPU)")
    parser.add_argument("--patterns", default=None, help="comma list of rules/patterns to compose")
    parser.add_argument("--work-dir", default=None, help="plan folder when planning (default <out>/plan)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the weights")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show third-party output (compilers, warnings) on the terminal; "
                             "it is always in the log")
    parser.add_argument("--log", default=None,
                        help="log file (default: $FACT_LOG_DIR/package.log, else <out>/logs/package.log)")
    args = parser.parse_args(None if argv is None else list(argv))
    args.dtype = dtype_spellings().get(args.dtype, args.dtype)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    patterns = [p for p in args.patterns.split(",") if p] if args.patterns else None
    log_path = Path(args.log) if args.log else default_log_path("package", Path(args.out))
    with RunLog(log_path, verbose=args.verbose or verbose_from_environment(), title="fact.package") as run:
        steps = 2 if args.plan is not None else 3
        try:
            with run.step("build the model file's module", 0, steps):
                torch.manual_seed(args.seed)
                model, inputs = build_from_model_file(args.model, args.dtype, device)
            if args.plan is not None:
                folder = Path(args.plan)
                load_plan(folder)  # a clear error for a folder without a plan
            else:
                folder = Path(args.work_dir) if args.work_dir else Path(args.out) / "plan"
                with run.step(f"plan {args.model} ({args.precision or 'precision from the dtype'}, "
                              f"{device})", 1, steps):
                    folder = plan(model, inputs, args.precision, work_dir=folder, patterns=patterns,
                                  tune=args.tune, compile_kernels=args.compile_kernels)
            with run.step(f"apply the plan on {device} (each replacement verified against the "
                          f"subgraph it replaces) and write the package", steps - 1, steps):
                target = package_plan(args.model, folder, args.out, device=device, dtype=args.dtype,
                                      name=args.name, patterns=patterns, model=model, inputs=inputs,
                                      log=run.say)
        except (CaptureError, FileNotFoundError, ValueError) as error:
            run.say(f"fact.package: error: {error} (full output: {log_path})", error=True)
            return 1
        run.say(f"wrote package {target} (import it with {target.name}.load(device=...); "
                f"see {target / 'README.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
