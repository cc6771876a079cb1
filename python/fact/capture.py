"""Command line: capture a model file's module as FACT graph JSON.

    python -m fact.capture path/to/model.py:ClassName -o graph.json \
        [--dtype float32|bfloat16|float16|bf16|fp16|...] [--device meta|cpu|cuda]

`capture` and `CaptureError` are re-exported here, so `from fact.capture import capture` works;
the module itself is callable as `capture` (see _CallableModule).
"""
from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Iterable

from fact.console import RunLog, default_log_path, verbose_from_environment
from fact.graph_capture import capture
from fact.graph_writer import CaptureError
from fact.model_file import dtype_spellings, build_from_model_file

__all__ = ["capture", "CaptureError", "main"]


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.capture",
                                     description="Capture a model file's module as FACT graph JSON.")
    parser.add_argument("model", help="path/to/model.py:ClassName")
    parser.add_argument("-o", "--output", required=True, help="graph JSON file to write")
    parser.add_argument("--dtype", choices=sorted(dtype_spellings()), default=None,
                        help="convert floating parameters and inputs to this dtype")
    parser.add_argument("--device", default=None, help="meta, cpu, cuda, cuda:1, ...")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show third-party output (torch.export warnings) on the terminal")
    parser.add_argument("--log", default=None,
                        help="log file for third-party output (default: $FACT_LOG_DIR/capture.log, "
                             "else logs/capture.log beside the graph)")
    args = parser.parse_args(None if argv is None else list(argv))
    args.dtype = dtype_spellings().get(args.dtype, args.dtype)
    log_path = Path(args.log) if args.log else default_log_path("capture", Path(args.output).resolve().parent)
    with RunLog(log_path, verbose=args.verbose or verbose_from_environment(), title="fact.capture") as run:
        try:
            with run.step(f"capture {args.model}"):
                model, inputs = build_from_model_file(args.model, args.dtype, args.device)
                doc = capture(model, inputs, args.output)
        except CaptureError as error:
            run.say(f"fact.capture: error: {error} (full output: {log_path})", error=True)
            return 1
        run.say(f"wrote {args.output}: {len(doc['nodes'])} nodes, {len(doc['values'])} values "
                f"(capture: {doc['source']['capture']})")
    return 0


class _CallableModule(types.ModuleType):
    """Importing this submodule rebinds the attribute `fact.capture` from the function to the
    module; making the module callable keeps `fact.capture(module, inputs)` working either way."""

    def __call__(self, *args, **kwargs):
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


if __name__ == "__main__":
    sys.exit(main())
