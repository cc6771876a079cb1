"""A probe for tests of `fact optimize`'s process tree (test_optimize_cli.py): with
$FACT_TEST_PROCESS_RECORD set, every Python process that starts with this folder on PYTHONPATH
appends one JSON line to that file when it exits: its pid, its command line, how many times it
called torch.export.export, and the .json files it opened for reading."""
import atexit
import builtins
import io
import json
import os
import sys

_RECORD = os.environ.get("FACT_TEST_PROCESS_RECORD")

if _RECORD:
    _exports = [0]
    _json_reads: list = []
    _open = io.open

    def _recording_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and str(file).endswith(".json") and not any(c in mode for c in "wax+"):
            _json_reads.append(os.path.abspath(os.fspath(file)))
        return _open(file, mode, *args, **kwargs)

    io.open = builtins.open = _recording_open

    import torch.export  # noqa: E402 - the probe wraps it before anything calls it

    _export = torch.export.export

    def _counting_export(*args, **kwargs):
        _exports[0] += 1
        return _export(*args, **kwargs)

    torch.export.export = _counting_export

    @atexit.register
    def _write_record():
        line = json.dumps({"pid": os.getpid(), "argv": sys.argv, "exports": _exports[0], "json_reads": _json_reads})
        with _open(_RECORD, "a") as record:
            record.write(line + "\n")
