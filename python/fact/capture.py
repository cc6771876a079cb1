"""Command line: capture a model file's module as FACT graph JSON.

    python -m fact.capture path/to/model.py:ClassName -o graph.json \
        [--dtype float32|bfloat16|float16] [--device meta|cpu|cuda]

`capture` and `CaptureError` are re-exported here, so `from fact.capture import capture` works;
the module itself is callable as `capture` (see _CallableModule).
"""
from __future__ import annotations

import argparse
import sys
import types
from typing import Iterable

from fact.graph_capture import capture
from fact.graph_writer import CaptureError
from fact.model_file import DTYPES, build_from_model_file

__all__ = ["capture", "CaptureError", "main"]


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.capture",
                                     description="Capture a model file's module as FACT graph JSON.")
    parser.add_argument("model", help="path/to/model.py:ClassName")
    parser.add_argument("-o", "--output", required=True, help="graph JSON file to write")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="convert floating parameters and inputs to this dtype")
    parser.add_argument("--device", default=None, help="meta, cpu, cuda, cuda:1, ...")
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        model, inputs = build_from_model_file(args.model, args.dtype, args.device)
        doc = capture(model, inputs, args.output)
    except CaptureError as error:
        print(f"fact.capture: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: {len(doc['nodes'])} nodes, {len(doc['values'])} values "
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
