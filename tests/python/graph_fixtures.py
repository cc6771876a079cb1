"""Committed graph fixtures of the pattern tests: `regenerate` writes (or, with --check, checks)
one graph.json per fixture, each the capture of a small model on the meta device, so that a
pattern's C++ discovery tests read graphs exactly as `fact.graph_capture` produces them.

    regenerate(fixtures, folder, argv=None) -> exit status

`fixtures`: (name, module, dtype, input shapes) tuples; the files are <folder>/<name>.json.
With --check in argv nothing is written and the status is 1 when a fixture is missing or
differs (its names are printed)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable, Sequence

import torch

from fact.graph_capture import capture
from fact.graph_writer import dumps_graph


def regenerate(fixtures: Iterable[tuple[str, torch.nn.Module, torch.dtype, Sequence[tuple]]],
               folder: Path, argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"regenerate the graph fixtures in {folder}")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name, module, dtype, shapes in fixtures:
        module = module.to(dtype).eval()
        inputs = [torch.zeros(shape, dtype=dtype, device="meta") for shape in shapes]
        text = dumps_graph(capture(module.to("meta"), inputs))
        path = Path(folder) / f"{name}.json"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale:", ", ".join(stale))
        return 1
    return 0
