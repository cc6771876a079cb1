"""The common part of the kernel C ABI (include/fact/core/fact_abi.h, docs/abi.md) as Python
needs it: the ABI version, the FactStatus names and the FactCallHeader every kind's argument
struct starts with. Nothing here knows a kind; tests/python/test_native_op.py checks every
number below against the header with the C compiler. The status names come from the engine's
table (fact_engine_tables), not from a copy here.
"""
from __future__ import annotations

import struct

FACT_ABI_VERSION = 2

FACT_OK = 0
FACT_ERR_CANNOT_IMPLEMENT = 2


def __getattr__(name: str):
    """STATUS_NAMES (FactStatus value -> its name in fact_abi.h) comes from the engine's one table
    (fact_engine_tables, python/fact/engine_tables.py), read when first asked for."""
    if name == "STATUS_NAMES":
        from fact import engine_tables
        return engine_tables.status_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# FactCallHeader: uint32 abi_version, kind, size, reserved (little-endian, 16 bytes).
HEADER_FORMAT = "<IIII"
HEADER_SIZE = struct.calcsize(HEADER_FORMAT)
POINTER_SIZE = 8  # a pointer slot of an argument image holds a 64-bit address


def status_name(status: int) -> str:
    """FactStatus's name ("FACT_ERR_INVALID_ARGS"), or "unknown FactStatus <n>"; the bare number
    when the engine library (which holds the names) cannot be loaded."""
    from fact import _engine, engine_tables
    try:
        names = engine_tables.status_names()
    except _engine.EngineNotFound:
        return f"FactStatus {int(status)}"
    return names.get(int(status), f"unknown FactStatus {int(status)}")


def read_header(image: bytes) -> tuple[int, int, int, int]:
    """(abi_version, kind id, size, reserved) of an argument image."""
    return struct.unpack_from(HEADER_FORMAT, image, 0)
