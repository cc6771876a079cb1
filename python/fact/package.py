"""The composed module as an importable Python package (`fact optimize` writes one).

    python -m fact.package path/to/model.py:ClassName -o out/ [--precision strict|tf32|native]
        [--dtype float32|bfloat16|float16] [--device cuda|cpu] [--compile|--no-compile]
        [--tune N] [--patterns a,b] [--name fact_model] [--work-dir out/plan] [--seed 0]

builds the model file's module (get_init_inputs(), weights from `--seed`) and its example
inputs (get_inputs()), plans the composition with the engine (`fact.compose.plan`), applies it
once (verifying every kernel against float64 when the device is a GPU) and writes

    <out>/<name>/__init__.py     load(device="cuda", **options) -> ComposedModule
                 plan.json       the plan, kernel library paths relative to the package
                 kernels/*.so    the kernel libraries of the composed GEMMs
                 <model file>    a copy of the model file
                 state_dict.pt   the weights that were optimized
                 package.json    class, dtype, precision, where it was planned and verified
                 report.json     the composition report at optimize time
                 README.md       how to use it

Importing the package needs `fact` (the Python front end) and torch, not the engine.
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

from fact.compose import (PRECISIONS, ComposedModule, FactReport, apply_plan, load_plan, plan,
                          _match_label)
from fact.graph_writer import CaptureError
from fact.model_file import DTYPES, build_from_model_file, load_model_file

PACKAGE_SCHEMA = "fact.package/1"

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
    inputs; default get_inputs()), remainder ("inductor" | "eager"), cuda_graphs, patterns,
    verify (see fact.package.load_package)."""
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


def _relative_plan(doc: dict, kernel_names: dict[str, str]) -> dict:
    relative = dict(doc)
    relative["kernels"] = {key: f"kernels/{name}" for key, name in kernel_names.items()}
    return relative


def _rejected_matches(doc: dict, report: FactReport | None) -> dict[str, str]:
    """Matches whose kernels failed verification (or could not run) at optimize time: a
    package leaves them to PyTorch even when loaded with verify=False."""
    if report is None:
        return {}
    reasons = {item.what: item.reason for item in report.left_to_pytorch}
    rejected = {}
    for index, match in enumerate(doc.get("matches", [])):
        reason = reasons.get(_match_label(match), "")
        if any(word in reason for word in ("verification failed", "verification run failed",
                                           "cannot implement")):
            rejected[str(index)] = reason
    return rejected


def write_package(out_dir: str | Path, model_file: str | Path, class_name: str,
                  plan_dir: str | Path, *, module: torch.nn.Module | None = None,
                  package_name: str | None = None, dtype: str | None = None,
                  report: FactReport | None = None, verified: bool = False) -> Path:
    """Writes `<out_dir>/<package_name>/` (layout in the module docstring) and returns it.
    `module` supplies the weights (state_dict.pt); without it the package builds fresh
    weights from the model file. `report` is the optimize-time composition report (matches
    that failed verification there stay PyTorch in the package); `verified` says whether the
    kernels were verified on a GPU. Raises CaptureError when the model file lacks the class
    or get_inputs(), FileNotFoundError for a missing plan or kernel library."""
    model_file = Path(model_file)
    load_model_file(f"{model_file}:{class_name}")  # clear message for a bad model file
    doc, plan_folder = load_plan(plan_dir)
    name = package_name or default_package_name(class_name)
    if not name.isidentifier():
        raise ValueError(f"package name '{name}' is not a Python identifier")
    target = Path(out_dir) / name
    if target.exists():
        shutil.rmtree(target)
    (target / "kernels").mkdir(parents=True)

    kernel_names: dict[str, str] = {}
    for key, library in doc.get("kernels", {}).items():
        source = Path(library) if Path(library).is_absolute() else plan_folder / library
        if not source.is_file():
            raise FileNotFoundError(f"kernel library {source} of the plan does not exist")
        kernel_names[key] = f"{key[:16]}_{source.name}"
        shutil.copy2(source, target / "kernels" / kernel_names[key])
    packaged = _relative_plan(doc, kernel_names)
    packaged["rejected"] = _rejected_matches(doc, report)
    (target / "plan.json").write_text(json.dumps(packaged, indent=2) + "\n")
    shutil.copy2(model_file, target / model_file.name)
    if module is not None:
        torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()},
                   target / "state_dict.pt")
    meta = {
        "schema": PACKAGE_SCHEMA, "class_name": class_name, "model_file": model_file.name,
        "dtype": dtype, "precision": doc["precision"], "planned_on": doc["device"],
        "compiled": bool(kernel_names), "verified": bool(verified),
        "weights": "state_dict.pt" if module is not None else None,
        "inputs": doc.get("inputs", []), "torch": torch.__version__.split("+")[0],
    }
    (target / "package.json").write_text(json.dumps(meta, indent=2) + "\n")
    if report is not None:
        (target / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (target / "__init__.py").write_text(_INIT_TEMPLATE.format(
        class_name=class_name, model_file=model_file.name, precision=doc["precision"], name=name))
    (target / "README.md").write_text(_readme(name, meta, report, len(kernel_names)))
    return target


def _readme(name: str, meta: dict, report: FactReport | None, kernel_count: int) -> str:
    state = ("verified against float64 on a GPU when it was written" if meta["verified"] else
             "compiled but NOT verified (written without a GPU); load(device='cuda') verifies "
             "each kernel on the GPU before using it" if meta["compiled"] else
             "not compiled (no kernel libraries): on a GPU every match stays PyTorch; on the CPU "
             "the composed GEMMs run the float64 reference")
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
        f"model = {name}.load(device='cuda')            # or device='cpu' (reference implementation)",
        f"x = {name}.example_inputs('cuda')             # get_inputs() of the model file",
        "y = model(*x)",
        "print(model.fact_report)                        # what runs where, and why",
        "```",
        "",
        "`load` options: `inputs=` (example inputs with the planned shapes and dtypes), "
        "`remainder='inductor'|'eager'` (the PyTorch rest of the graph), `cuda_graphs=True`, "
        "`patterns=` (compose only these rules/patterns), `verify=` (check each kernel against "
        "float64 on the GPU first; default True).",
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
                 inputs: Sequence[Any] | None = None, remainder: str = "inductor",
                 cuda_graphs: bool = False, patterns: Iterable[str] | str | None = None,
                 verify: bool = True) -> ComposedModule:
    """The packaged module composed on `device` from the package's plan and kernel libraries
    (fact.compose.apply_plan; no engine)."""
    package_dir = Path(package_dir)
    model, example = build_packaged_model(package_dir, device)
    return apply_plan(model, tuple(inputs) if inputs is not None else example, package_dir,
                      remainder=remainder, cuda_graphs=cuda_graphs, patterns=patterns,
                      verify=verify, kernel_dir=package_dir)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.package",
                                     description="Plan a model file's composition and write it "
                                                 "as an importable Python package.")
    parser.add_argument("model", help="path/to/model.py:ClassName")
    parser.add_argument("-o", "--out", required=True, help="folder to write the package into")
    parser.add_argument("--name", default=None, help="package name (default fact_<class>)")
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="default: strict for float32 models, native otherwise")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--compile", dest="compile_kernels", action="store_true", default=None,
                        help="compile the kernels (default: when the device is a GPU)")
    parser.add_argument("--no-compile", dest="compile_kernels", action="store_false")
    parser.add_argument("--tune", type=int, default=0,
                        help="tune each GEMM over at most N configurations first (GPU)")
    parser.add_argument("--patterns", default=None, help="comma list of rules/patterns to compose")
    parser.add_argument("--work-dir", default=None, help="plan folder (default <out>/plan)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed for the weights")
    args = parser.parse_args(None if argv is None else list(argv))

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    file_part, _, class_name = args.model.rpartition(":")
    try:
        torch.manual_seed(args.seed)
        model, inputs = build_from_model_file(args.model, args.dtype, device)
    except CaptureError as error:
        print(f"fact.package: error: {error}", file=sys.stderr)
        return 1
    floating = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    precision = args.precision or ("strict" if not floating or floating[0].dtype == torch.float32
                                   else "native")
    out = Path(args.out)
    work = Path(args.work_dir) if args.work_dir else out / "plan"
    patterns = [p for p in args.patterns.split(",") if p] if args.patterns else None
    on_gpu = torch.device(device).type == "cuda"
    print(f"== plan: {args.model} (precision {precision}, {device})", flush=True)
    folder = plan(model, inputs, precision, work_dir=work, patterns=patterns, tune=args.tune,
                  compile_kernels=args.compile_kernels)
    composed = apply_plan(model, inputs, folder, remainder="eager", patterns=patterns,
                          verify=on_gpu, report_path=folder / "report.json")
    report = composed.fact_report
    if not on_gpu:
        report.notes.append(f"written on {device}: kernels "
                            + ("compiled" if load_plan(folder)[0].get("kernels") else "not compiled")
                            + ", not verified (no GPU); the composed GEMMs ran the reference here")
    print(report, flush=True)
    try:
        target = write_package(out, file_part, class_name, folder, module=model,
                               package_name=args.name, dtype=args.dtype, report=report,
                               verified=on_gpu)
    except (CaptureError, FileNotFoundError, ValueError) as error:
        print(f"fact.package: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote package {target} (import it with {target.name}.load(device=...); "
          f"see {target / 'README.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
