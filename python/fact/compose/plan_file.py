"""The plan document (docs/plan.md, schema fact.plan/2) as read from its folder, and how
reports name one of its replacements."""
from __future__ import annotations

import json
from pathlib import Path

PLAN_SCHEMA = "fact.plan/2"
PLAN_FILE = "plan.json"
USABLE_KERNEL_STATUSES = ("built", "cached")


def load_plan(plan_dir: str | Path, document: dict | None = None) -> tuple[dict, Path]:
    """(plan.json's document, the folder it is in); `plan_dir` may name the file itself.
    `document`: the plan already in memory (the file is then not read; its folder still anchors
    relative kernel paths). Raises ValueError for a document that is not a fact.plan/2 plan."""
    path = Path(plan_dir)
    file = path if path.is_file() else path / PLAN_FILE
    doc = document if document is not None else json.loads(file.read_text())
    if doc.get("schema") != PLAN_SCHEMA:
        raise ValueError(f"{file} is a '{doc.get('schema')}' document, not a {PLAN_SCHEMA} plan")
    return doc, file.parent


def replacement_label(replacement: dict) -> str:
    """"<label> <rule> at <first node>..<last node>": how reports name a replacement."""
    nodes = replacement.get("nodes", [])
    span = nodes[0] if len(nodes) == 1 else f"{nodes[0]}..{nodes[-1]}" if nodes else "?"
    label = str(replacement.get("label", replacement.get("id", "?")))
    return f"{label} {replacement.get('rule', '?')} at {span}"
