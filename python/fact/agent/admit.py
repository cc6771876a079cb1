"""`fact registry add ENTRY.json` and `fact registry import FILE`: a kernel entry enters the
registry only after it passes the gates here (fact.agent.gates), whatever record it carries.

The entry's reference semantics (its captured fragment) give the call (fact_engine_agent_task
with the fragment) and the float64 reference; its source is built by the engine for its arch;
the gates run in a child process with a time limit. The entry's own gate and verification
records are replaced by this machine's; an entry for sm_90a needs a Hopper GPU here. Then the
engine stores it (fact_registry "add", which refuses an entry without a passing gate record
for exactly its source and semantics).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from fact.agent import engine, gates
from fact.agent.synthesize import _device_name, _sha256, _shape_summary


class Refused(Exception):
    """The entry did not pass; the message says which gate or which field."""


def admit(doc: dict, *, registry_dir: str | Path | None = None, timeout: float = 120.0,
          how: str = "fact registry add") -> dict:
    """Runs the gates on `doc` and stores it; returns the stored entry. Raises Refused."""
    if not isinstance(doc, dict):
        raise Refused("an entry is a JSON object")
    doc = dict(doc)
    doc.setdefault("origin", "user")
    doc.setdefault("provenance", {"by": doc["origin"]})
    source = doc.get("source") if isinstance(doc.get("source"), dict) else None
    reference = doc.get("reference") if isinstance(doc.get("reference"), dict) else None
    if source is None or not source.get("text"):
        raise Refused("the entry has no kernel source (built-in templates are not added from files)")
    if reference is None or not isinstance(reference.get("fragment"), dict):
        raise Refused("the entry has no reference semantics (reference.fragment)")
    arch = doc.get("arch", "")
    device = "cpu" if arch == "host" else "cuda"
    if arch not in ("host", "sm_90a"):
        raise Refused(f"arch {arch!r} is not host or sm_90a")
    if device == "cuda":
        why = engine.device().get("gpu_unavailable")
        if why:
            raise Refused(f"needs a Hopper GPU to run the gates: {why}")
    precision = reference.get("precision") or ""
    try:
        task = engine.fragment_task(reference["fragment"], doc.get("rule", "subgraph"), doc.get("dtype", "float32"),
                                    precision)
    except engine.AgentEngineError as error:
        raise Refused(f"the reference semantics cannot be packed into a call: {error}") from None
    build = engine.build(source["text"], device="host" if arch == "host" else "cuda",
                         kind=source.get("abi", "subgraph"), name=f"registry_{doc.get('rule', 'kernel')}")
    if build.get("status") not in ("built", "cached"):
        shown = "; ".join(f"{d['file']}:{d['line']}: {d['message']}" for d in build.get("diagnostics", [])[:5])
        raise Refused(f"the source does not build ({build.get('reason') or build.get('status')}): {shown}")
    with tempfile.TemporaryDirectory(prefix="fact_admit_") as folder:
        report = gates.run_gates(task["call"], reference["fragment"], build["library"], device=device,
                                 timeout=timeout, work_dir=folder)
    if not report.passed:
        raise Refused(f"rejected by the gate {report.failed_check}: {report.failure}")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    device_name = _device_name(device)
    semantics_hash = task["semantics"]["hash"]
    doc["reference"] = {**reference, "semantics_hash": semantics_hash, "tolerance": task["call"].get("tolerance")}
    doc["gates"] = {"passed": True, "source_sha256": _sha256(source["text"]), "semantics_hash": semantics_hash,
                    "checks": [{"name": c["name"], "passed": c["passed"]} for c in report.checks],
                    "device": device_name, "date": now, "by": how}
    verified = [v for v in doc.get("verified", []) if isinstance(v, dict)]
    verified.append({"semantics_hash": semantics_hash, "shape": _shape_summary(task["call"]), "device": device_name,
                     "rel_err": report.rel_err, "tolerance": report.tolerance, "date": now,
                     "checks": [c["name"] for c in report.checks if c["passed"]]})
    doc["verified"] = verified
    if report.timing:
        doc.setdefault("tuned", []).append({"semantics_hash": semantics_hash, "device": device_name,
                                            "ms": report.timing.get("ms"),
                                            "baseline": {"name": "PyTorch eager (same run)",
                                                         "ms": report.timing.get("baseline_ms")},
                                            "speedup": report.timing.get("speedup"), "timer": report.timing.get("timer"),
                                            "date": now})
    try:
        return engine.registry("add", dir=registry_dir, entry=doc)["entry"]
    except engine.AgentEngineError as error:
        raise Refused(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fact.agent.admit")
    parser.add_argument("op", choices=("add", "import"))
    parser.add_argument("file")
    parser.add_argument("--dir", default=None, help="registry folder")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    try:
        document = json.loads(Path(args.file).read_text())
    except (OSError, ValueError) as error:
        print(f"fact registry {args.op}: cannot read {args.file}: {error}", file=sys.stderr)
        return 2
    entries = document.get("entries", []) if args.op == "import" else [document]
    if args.op == "import" and not isinstance(entries, list):
        print(f"fact registry import: {args.file} is not a fact.registry.export/1 file", file=sys.stderr)
        return 2
    failed = 0
    for doc in entries:
        if isinstance(doc, dict) and doc.get("origin") == "builtin":
            print(f"skipped {doc.get('id')}: built in (comes with the engine)")
            continue
        name = doc.get("id") or f"{doc.get('rule')}/{doc.get('dtype')}/{doc.get('arch')}" if isinstance(doc, dict) else "?"
        try:
            stored = admit(doc, registry_dir=args.dir, timeout=args.timeout, how=f"fact registry {args.op}")
        except Refused as error:
            failed += 1
            print(f"refused {name}: {error}", file=sys.stderr)
            continue
        print(f"added {stored['id']} (revision {stored.get('revision')}, registry version "
              f"{stored.get('registry_version')}): passed every gate here")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
