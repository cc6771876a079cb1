"""The common part of the kernel C ABI (include/fact/runtime/fact_abi.h, docs/abi.md) as Python
needs it: the ABI version, the FactStatus names and the FactCallHeader every kind's argument
struct starts with. Nothing here knows a kind; tests/python/test_native_op.py checks every
number below against the header with the C compiler.
"""
from __future__ import annotations

import struct

FACT_ABI_VERSION = 2

FACT_OK = 0
FACT_ERR_CANNOT_IMPLEMENT = 2

# FactStatus value -> its name in fact_abi.h.
STATUS_NAMES = {
    0: "FACT_OK",
    1: "FACT_ERR_INVALID_ARGS",
    2: "FACT_ERR_CANNOT_IMPLEMENT",
    3: "FACT_ERR_WORKSPACE",
    4: "FACT_ERR_INITIALIZE",
    5: "FACT_ERR_LAUNCH",
    6: "FACT_ERR_INTERNAL",
}

# FactCallHeader: uint32 abi_version, kind, size, reserved (little-endian, 16 bytes).
HEADER_FORMAT = "<IIII"
HEADER_SIZE = struct.calcsize(HEADER_FORMAT)
POINTER_SIZE = 8  # a pointer slot of an argument image holds a 64-bit address


def status_name(status: int) -> str:
    """FactStatus's name ("FACT_ERR_INVALID_ARGS"), or "unknown FactStatus <n>"."""
    return STATUS_NAMES.get(int(status), f"unknown FactStatus {int(status)}")


def read_header(image: bytes) -> tuple[int, int, int, int]:
    """(abi_version, kind id, size, reserved) of an argument image."""
    return struct.unpack_from(HEADER_FORMAT, image, 0)
