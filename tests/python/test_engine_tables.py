"""The vocabulary tables Python reads from libfact (python/fact/engine_tables.py, through
fact_engine_tables): FactStatus names, dtypes, precision modes and tolerances are declared once in
the engine, and the Python side neither repeats nor disagrees with them."""
from __future__ import annotations

import re
from pathlib import Path

from fact import abi, engine_tables
from fact.conformance import corpus

ROOT = Path(__file__).resolve().parents[2]


def test_status_names_are_the_enumerators_of_fact_abi_h():
    header = (ROOT / "include" / "fact" / "core" / "fact_abi.h").read_text()
    body = header[header.index("typedef enum FactStatus"):header.index("} FactStatus;")]
    declared = {int(value): name for name, value in re.findall(r"(FACT_\w+)\s*=\s*(\d+)", body)}
    assert engine_tables.status_names() == declared
    assert abi.STATUS_NAMES == declared
    assert abi.status_name(2) == "FACT_ERR_CANNOT_IMPLEMENT"
    assert abi.status_name(99) == "unknown FactStatus 99"


def test_precision_modes_and_their_tolerances():
    assert engine_tables.precisions() == ("strict", "tf32", "native")
    assert engine_tables.tolerance("strict", "float32") == 1e-5
    assert engine_tables.tolerance("tf32", "fp32") == 5e-3
    assert engine_tables.tolerance("native", "bf16") == 2e-2
    assert engine_tables.tolerance("strict", "half") == 2e-2  # a 16-bit output's rounding bound
    assert engine_tables.tables()["three_tf32"] == "3xtf32"
    assert corpus.OUTPUT_BOUND == {"strict": 1e-5, "native": 2e-2}
    assert corpus.PRECISION_BY_DTYPE == {"float32": "strict", "bfloat16": "native", "float16": "native"}


def test_dtype_spellings_and_abi_values():
    assert engine_tables.dtype_name("bf16") == "bfloat16"
    assert engine_tables.dtype_name("torch.half") == "float16"
    assert engine_tables.dtype_name("f32") == "float32"
    by_name = {entry["name"]: entry for entry in engine_tables.tables()["dtypes"]}
    assert [by_name[name]["abi"] for name in ("float32", "float16", "bfloat16", "float64")] == [1, 2, 3, 4]
    assert by_name["bfloat16"]["bytes"] == 2
    try:
        engine_tables.dtype_name("float8")
    except ValueError as error:
        assert "unknown dtype" in str(error)
    else:
        raise AssertionError("float8 parsed")


def test_python_repeats_no_table():
    """No Python module spells the precision modes as a list, a status-name table or the
    tolerance numbers: they come from the engine."""
    offenders = []
    for path in sorted((ROOT / "python" / "fact").rglob("*.py")):
        if path.name == "engine_tables.py":  # the reader of the tables documents what they hold
            continue
        text = path.read_text()
        if re.search(r'\(\s*"strict",\s*"tf32",\s*"native"\s*\)', text):
            offenders.append(f"{path.relative_to(ROOT)}: lists the precision modes")
        if re.search(r'"FACT_ERR_\w+"\s*[,}]', text) and path.name != "prompt.py":
            offenders.append(f"{path.relative_to(ROOT)}: spells a FactStatus name table")
        if re.search(r'"strict":\s*1e-5', text):
            offenders.append(f"{path.relative_to(ROOT)}: repeats a tolerance")
    assert not offenders, "\n".join(offenders)
