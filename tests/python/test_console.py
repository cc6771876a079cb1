"""Quiet by default, everything in a log (fact.console): a fake noisy stage — Inductor-style
autotuning lines through print, sys.stderr, logging, warnings, a raw file descriptor and a
child process — leaves only FACT's lines on the terminal and all of it in the log; -v shows
both. Also `python -m fact.measure` (its stages faked: no GPU here) keeps the noise in
<out>/logs/measure.log."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from test_compose_plan import _python_env

NOISE = ["triton_mm_54 0.1937 ms 58.8% ACC_TYPE='tl.float32' ALLOW_TF32=False BLOCK_K=64",
         "AUTOTUNE mm(8192x768, 768x3072)", "UserWarning: noisy third-party warning",
         "torch._inductor.select_algorithm: benchmarking", "raw fd write from C", "child process output"]

NOISY_STAGE = textwrap.dedent('''
    import logging, os, subprocess, sys, warnings
    from pathlib import Path
    from fact.console import RunLog

    def noisy_stage():
        print("triton_mm_54 0.1937 ms 58.8% ACC_TYPE='tl.float32' ALLOW_TF32=False BLOCK_K=64")
        sys.stderr.write("AUTOTUNE mm(8192x768, 768x3072)\\n")
        warnings.warn("noisy third-party warning", UserWarning)
        logging.getLogger("torch._inductor.select_algorithm").warning("benchmarking")
        os.write(1, b"raw fd write from C\\n")
        subprocess.run(["sh", "-c", "echo child process output"], check=True)

    logging.basicConfig(format="%(name)s: %(message)s")
    with RunLog(Path(sys.argv[1]), verbose=sys.argv[2] == "1", title="fake") as run:
        run.say("FACT stage header")
        with run.step("compile and time the noisy stage", 1, 3):
            noisy_stage()
        run.say("| FACT table |")
    print("after the log is closed")
''')


def _run_noisy(tmp_path: Path, verbose: bool) -> tuple[str, str]:
    script = tmp_path / "noisy.py"
    script.write_text(NOISY_STAGE)
    log = tmp_path / "logs" / "stage.log"
    done = subprocess.run([sys.executable, str(script), str(log), "1" if verbose else "0"],
                          capture_output=True, text=True, env=_python_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr, log.read_text()


def test_a_noisy_stage_shows_only_facts_lines_and_logs_everything(tmp_path):
    terminal, log = _run_noisy(tmp_path, verbose=False)
    for line in NOISE:
        assert line not in terminal, f"{line!r} reached the terminal:\n{terminal}"
        assert line.split(": ")[-1] in log, f"{line!r} is not in the log:\n{log}"
    assert "FACT stage header" in terminal and "| FACT table |" in terminal
    assert "[#############.......] 2/3 compile and time the noisy stage: done" in terminal
    assert "after the log is closed" in terminal  # the terminal is restored
    assert "FACT stage header" in log and "| FACT table |" in log


def test_verbose_shows_the_noise_too_and_still_logs_it(tmp_path):
    terminal, log = _run_noisy(tmp_path, verbose=True)
    for line in NOISE:
        assert line.split(": ")[-1] in terminal, terminal
        assert line.split(": ")[-1] in log, log
    assert "FACT stage header" in terminal


def test_an_error_is_one_line_on_the_terminal_and_a_traceback_in_the_log(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent('''
        import sys
        from pathlib import Path
        from fact.console import RunLog
        with RunLog(Path(sys.argv[1]), title="fake") as run:
            print("noise before the error")
            raise ValueError("the stage broke")
    '''))
    log = tmp_path / "fails.log"
    done = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True,
                          env=_python_env(), timeout=120)
    assert done.returncode != 0
    assert "fake: error: ValueError: the stage broke" in done.stderr and str(log) in done.stderr
    assert "noise before the error" not in done.stdout + done.stderr
    assert "Traceback" in log.read_text() and "noise before the error" in log.read_text()


FAKE_MEASURE = textwrap.dedent('''
    import sys, warnings
    import torch
    import fact.measure as m

    def fake_measure(package_dir, max_autotune=True, warmup=10, iters=30, log=print, progress=None, **_):
        with progress("compile and time torch.compile (max-autotune)", 0, 2):
            print("AUTOTUNE mm(8192x768, 768x3072)")
            print("  triton_mm_54 0.1937 ms 58.8% ACC_TYPE='tl.float32'")
            warnings.warn("inductor says something")
        log("float64 check (seed 1): FACT rel_err 0.001, PyTorch 0.002")
        stats = {"median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1, "timer": "CUDA events"}
        return {"suite": "e2e", "device": "fake H100", "cases": [{
            "precision": "native", "remainder": "inductor", "left_to_pytorch": [],
            "timing": {"fact": stats, "torch_eager": {**stats, "median_ms": 2.0}},
            "speedup": {"torch_eager": 2.0},
            "verification": {"seed": 1, "fact_rel_err": 1e-3, "torch_rel_err": 2e-3}}]}

    torch.cuda.is_available = lambda: True
    m.measure = fake_measure
    sys.exit(m.main(sys.argv[1:]))
''')


def test_measure_keeps_inductor_autotuning_out_of_the_terminal(tmp_path):
    script = tmp_path / "fake_measure.py"
    script.write_text(FAKE_MEASURE)
    out = tmp_path / "out"
    env = _python_env()
    env.pop("FACT_LOG_DIR", None)
    env.pop("FACT_VERBOSE", None)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "pkg"), "-o", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    terminal = done.stdout + done.stderr
    assert "triton_mm_54" not in terminal and "AUTOTUNE" not in terminal and "inductor says" not in terminal
    assert "| torch_eager | 2.000 |" in terminal and "FACT rel_err 0.001" in terminal
    log = (out / "logs" / "measure.log").read_text()
    assert "triton_mm_54" in log and "AUTOTUNE" in log and "inductor says something" in log
    assert (out / "e2e.md").is_file()


SLOW_STEP = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from fact.console import RunLog

    RunLog.HEARTBEAT_SECONDS = 1.0
    mirrored = []
    with RunLog(Path(sys.argv[1]), title="slow", mirror=mirrored.append) as run:
        with run.step("torch.compile (max-autotune)", 2, 5):
            time.sleep(2.6)
    print("mirrored:", mirrored)
''')


def test_a_long_step_is_never_silent_without_a_terminal(tmp_path):
    """Not a terminal (CI, | tee): a line every HEARTBEAT_SECONDS while a step runs, in the
    log and in the mirror (fact optimize's optimize.log) too."""
    script = tmp_path / "slow.py"
    script.write_text(SLOW_STEP)
    log = tmp_path / "logs" / "slow.log"
    done = subprocess.run([sys.executable, str(script), str(log)], capture_output=True, text=True,
                          env=_python_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    waiting = [line for line in done.stdout.splitlines() if "torch.compile (max-autotune) … " in line]
    assert [line.strip() for line in waiting[:2]] == ["[########............] 2/5 torch.compile (max-autotune) … 1s elapsed",
                                                      "[########............] 2/5 torch.compile (max-autotune) … 2s elapsed"], done.stdout
    assert "2/5 torch.compile (max-autotune) … 1s elapsed" in log.read_text()
    mirrored = done.stdout.split("mirrored:", 1)[1]
    assert "… 1s elapsed" in mirrored and "3/5 torch.compile (max-autotune): done" in mirrored, mirrored
