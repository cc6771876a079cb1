"""`fact optimize`'s driver (fact.optimize_run) as a user meets it: a reused output folder
holds only the new run's outputs (an earlier run's reports, plots, plan, logs and package go,
files that FACT did not write stay), and a --dtype that cannot apply (a model without floating
tensors) is said, not silently ignored."""
from __future__ import annotations

import torch

from fact.optimize_run import clear_previous_outputs, dtype_did_not_apply


def test_a_reused_folder_loses_the_earlier_runs_outputs_only(tmp_path):
    for name in ("report.md", "report.html", "e2e.json", "roofline.png", "graph.json"):
        (tmp_path / name).write_text("old")
    for folder in ("plan", "logs"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.json").write_text("{}")
    package = tmp_path / "fact_block"
    package.mkdir()
    (package / "__init__.py").write_text("def load():\n    from fact.package import load_package\n")
    mine = tmp_path / "fact_notes"  # a user's folder that happens to start with fact_
    mine.mkdir()
    (mine / "__init__.py").write_text("# my own module\n")
    (tmp_path / "notes.txt").write_text("keep me")
    removed = clear_previous_outputs(tmp_path)
    assert sorted(removed) == ["e2e.json", "fact_block", "graph.json", "logs", "plan", "report.html",
                               "report.md", "roofline.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fact_notes", "notes.txt"]
    assert clear_previous_outputs(tmp_path) == []


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.tensor([3], dtype=torch.int64))

    def forward(self, ids):
        return ids + self.offset


def test_a_dtype_that_cannot_apply_is_told():
    ids = torch.tensor([1, 2, 3])
    assert dtype_did_not_apply("bfloat16", Counter(), (ids,))
    assert not dtype_did_not_apply("float32", Counter(), (ids,))  # the default asks for nothing
    assert not dtype_did_not_apply("bfloat16", torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    assert not dtype_did_not_apply("fp16", Counter(), (torch.randn(3),))  # a floating input


def test_the_engines_lines_reach_the_screen_and_the_log_by_kind(tmp_path, capsys):
    """fact_optimize_plan_output's kinds: a line to both, the status line to a terminal only
    (never the log, and cleared before the next line), a log line to the log only."""
    from fact.optimize_run import RunOutput

    output = RunOutput(tmp_path, verbose=False)
    output.terminal = False
    output.engine(RunOutput.LINE, "realize: 2 kernel(s): 0 cached, 0 known failure(s), 2 to compile (ninja, 2 jobs):")
    output.engine(RunOutput.LIVE, "realize [....] 0/2 kernels compiled 1s elapsed")
    output.engine(RunOutput.LOG, "realize: 1/2 kernels compiled (gemm_x) 1s elapsed")
    shown = capsys.readouterr().out
    assert shown == "realize: 2 kernel(s): 0 cached, 0 known failure(s), 2 to compile (ninja, 2 jobs):\n"

    output.terminal = True
    output.engine(RunOutput.LIVE, "realize [##..] 1/2 kernels compiled 2s elapsed")
    output.engine(RunOutput.LINE, "realize: 2/2 kernels compiled in 3s")
    shown = capsys.readouterr().out
    assert shown == "\r\033[2Krealize [##..] 1/2 kernels compiled 2s elapsed\r\033[2Krealize: 2/2 kernels compiled in 3s\n"
    output.close()
    log = (tmp_path / "optimize.log").read_text()
    assert log.splitlines() == ["realize: 2 kernel(s): 0 cached, 0 known failure(s), 2 to compile (ninja, 2 jobs):",
                                "realize: 1/2 kernels compiled (gemm_x) 1s elapsed",
                                "realize: 2/2 kernels compiled in 3s"]
