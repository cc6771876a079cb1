"""ncu_sass_summary.py on a small source page: the hottest instructions, the branch that loops on
an mbarrier try-wait annotated with the barrier's shared-memory offset, and the samples summed
per offset (how the Q, K and V waits of the attention kernel were told apart)."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "ncu_sass_summary.py"

HEADER = '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"\n'
ROWS = [
    ("0x10", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R193+URZ+0x30030], R196", "5", "5"),
    ("0x20", "@!P0  BRA 0x400", "60", "55"),
    ("0x30", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24", "20", "10"),
    ("0x40", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R0+URZ+0x30010], R25", "1", "1"),
    ("0x50", "@!P0  BRA 0x500", "10", "9"),
    ("0x60", "@!P1  BRA 0x600", "4", "4"),  # a branch after no try-wait: not a barrier wait
]


def summarize(tmp_path, top="10"):
    csv = tmp_path / "sass.csv"
    csv.write_text('==PROF== a note before the table\n' + HEADER +
                   "".join(",".join(f'"{v}"' for v in row) + "\n" for row in ROWS))
    out = subprocess.run([sys.executable, str(SCRIPT), str(csv), top], capture_output=True, text=True, check=True)
    return out.stdout


def test_the_hottest_instruction_comes_first_with_its_share(tmp_path):
    lines = summarize(tmp_path).splitlines()
    assert lines[0].startswith("6 SASS instructions, 100 samples")
    assert "60.00" in lines[2] and "BRA 0x400" in lines[2]


def test_branches_that_loop_on_a_try_wait_name_the_barrier_offset(tmp_path):
    out = summarize(tmp_path)
    assert "BRA 0x400   <- mbarrier wait, shared offset 0x30030" in out
    assert "BRA 0x500   <- mbarrier wait, shared offset 0x30010" in out
    assert "BRA 0x600   <-" not in out


def test_barrier_waits_are_summed_per_offset(tmp_path):
    out = summarize(tmp_path)
    section = out.split("mbarrier waits by shared offset:")[1].split()
    assert section[:4] == ["0x30030", "60.00%", "0x30010", "10.00%"]
