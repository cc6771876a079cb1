"""Summarizes Nsight Compute's source page of one kernel (`ncu -i REPORT --page source --csv
--print-source sass`): the instructions where the warps were sampled most, with their share of
all samples and of the samples in which the warp did not issue, so that a device call's output
says where a kernel's time goes (scripts/device_attention.sh, FACT_ATTN_NCU_SOURCE=1).

A warp waiting on an mbarrier is sampled on the branch that loops back to the try-wait
(`SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R..+URZ+0x30030]` then `@!P0 BRA`): such a branch is
annotated with the barrier's shared-memory offset, and the samples are also summed per offset,
so that the waits for Q, K and V (fmha_sm90_shared_storage.cuh's FmhaSharedStorage: the tiles,
then q_full, q_empty, k_full, k_empty, v_full, v_empty, 8 bytes per stage) can be told apart.

Usage: python3 ncu_sass_summary.py SOURCE.csv [TOP]"""
import csv
import re
import sys

TRYWAIT = re.compile(r"SYNCS\.PHASECHK\S*\s+\S+,\s*\[[^\]]*?(0x[0-9a-fA-F]+)\]")


def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        lines = [line for line in f if line.strip()]
    # ncu prints notes before the table: the header is the first line naming the source column.
    start = next((i for i, line in enumerate(lines) if '"Source"' in line or line.startswith("Source")), 0)
    rows = list(csv.DictReader(lines[start:]))
    if not rows:
        print(f"{path}: no rows")
        return 1
    columns = list(rows[0])
    sampled = next((c for c in columns if c.startswith("Warp Stall Sampling (All")), None)
    not_issued = next((c for c in columns if c.startswith("Warp Stall Sampling (Not")), None)
    if sampled is None:
        print(f"{path}: no warp-sampling column; columns: {columns}")
        return 1
    waits = barrier_waits(rows)
    total = sum(number(r[sampled]) for r in rows) or 1.0
    total_ni = sum(number(r[not_issued]) for r in rows) or 1.0 if not_issued else 1.0
    print(f"{len(rows)} SASS instructions, {total:.0f} samples ({sampled}); top {top}:")
    print(f"{'all %':>6s} {'stall %':>7s}  address  instruction")
    for r in sorted(rows, key=lambda r: -number(r[sampled]))[:top]:
        share = 100.0 * number(r[sampled]) / total
        stall = 100.0 * number(r[not_issued]) / total_ni if not_issued else 0.0
        source = r.get("Source", "")[:90]
        if id(r) in waits:
            source += f"   <- mbarrier wait, shared offset {waits[id(r)]}"
        print(f"{share:6.2f} {stall:7.2f}  {r.get('Address', ''):>8s}  {source}")
    # Samples by instruction kind (the opcode's first word): where the time goes in aggregate.
    kinds = {}
    for r in rows:
        op = (r.get("Source", "").split() or ["?"])[0]
        if op.startswith("@"):
            op = (r.get("Source", "").split() + ["?", "?"])[1]
        kinds[op.split(".")[0]] = kinds.get(op.split(".")[0], 0.0) + number(r[sampled])
    print("\nsamples by opcode:")
    for op, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {op:12s} {100.0 * n / total:6.2f}%")
    by_offset = {}
    for r in rows:
        if id(r) in waits:
            by_offset[waits[id(r)]] = by_offset.get(waits[id(r)], 0.0) + number(r[sampled])
    if by_offset:
        print("\nmbarrier waits by shared offset:")
        for offset, n in sorted(by_offset.items(), key=lambda kv: -kv[1]):
            print(f"  {offset:10s} {100.0 * n / total:6.2f}%")
    return 0


def barrier_waits(rows):
    """{id(row): offset} for each branch that loops on the mbarrier try-wait just before it."""
    waits = {}
    for before, row in zip(rows, rows[1:]):
        source = row.get("Source", "").split()
        match = TRYWAIT.search(before.get("Source", ""))
        if match and len(source) >= 2 and source[0].startswith("@") and source[1] == "BRA":
            waits[id(row)] = match.group(1).lower()
    return waits


if __name__ == "__main__":
    sys.exit(main())
