"""The engine's vocabulary tables, read from libfact at run time: FactStatus names, element
types (names, aliases, ABI values, sizes), precision modes and the tolerance of each
(precision, output dtype). They are declared once, in the engine (include/fact/core/
status_names.hpp, dtype.hpp, precision.hpp), and `fact_engine_tables()` (include/fact/engine/
c_api.h) hands them over as JSON.

Why read them at run time rather than generate a Python module at build time: a generated file
is a second copy that a source tree, an editable install or a stale build/ can hold out of step
with the library actually loaded; reading the loaded libfact cannot disagree with it, and every
Python path that plans, verifies or runs the host reference loads libfact already. The tables
are read once per process (cached); a process without libfact raises EngineNotFound when it
first asks.
"""
from __future__ import annotations

import functools
import json

from fact import _engine


@functools.lru_cache(maxsize=None)
def tables() -> dict:
    """fact_engine_tables() as a dict: {"status", "dtypes", "precisions", "tolerances", ...}."""
    return json.loads(_engine.engine_library().tables())


def status_names() -> dict[int, str]:
    """FactStatus value -> its name in fact_abi.h ("FACT_OK", ...)."""
    return {int(entry["value"]): entry["name"] for entry in tables()["status"]}


def precisions() -> tuple[str, ...]:
    """The precision modes' names: ("strict", "tf32", "native")."""
    return tuple(entry["name"] for entry in tables()["precisions"])


def dtype_names() -> dict[str, str]:
    """Every accepted dtype spelling (name, short label, aliases) -> torch's name:
    {"bf16": "bfloat16", "half": "float16", "float32": "float32", ...}."""
    spellings = {}
    for entry in tables()["dtypes"]:
        if entry["name"] == "unknown":
            continue
        for spelling in (entry["name"], entry["label"], *entry["aliases"]):
            spellings[spelling] = entry["name"]
    return spellings


def dtype_name(text: str) -> str:
    """torch's name of any accepted spelling ("bf16" -> "bfloat16", "torch.half" ->
    "float16"); ValueError for one the engine does not know."""
    key = text[len("torch."):] if text.startswith("torch.") else text
    try:
        return dtype_names()[key]
    except KeyError:
        raise ValueError(f"unknown dtype '{text}' (expected one of {', '.join(sorted(dtype_names()))})") from None


def tolerance(precision: str, dtype: str) -> float:
    """The verification bound ||out - ref|| / ||ref|| of a run in `precision` whose output has
    `dtype` (any accepted spelling): max(the mode's bound, the output dtype's rounding bound)."""
    by_dtype = tables()["tolerances"][precision]
    return float(by_dtype[dtype_name(dtype)])


def default_precision(dtype: str) -> str:
    """The precision mode a model of `dtype` runs in unless told otherwise ("native" for
    bf16/fp16, "strict" otherwise)."""
    return tables()["default_precision"][dtype_name(dtype)]
