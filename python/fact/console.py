"""Quiet by default, everything in a log: FACT's own lines on the terminal, the rest of a run's
output — Inductor's autotuning tables, compiler output, warnings, third-party logging — in the
run's log file.

    with RunLog(out / "logs" / "measure.log", verbose=args.verbose) as run:
        run.say("composed: 3 replacement(s)")             # terminal and log
        with run.step("torch.compile (max-autotune)", 3, 5):
            ...                                            # noise goes to the log
        run.say(table)

While a RunLog is open, file descriptors 1 and 2 (so `print`, `sys.stderr.write`, `warnings`,
`logging`, C/C++ libraries and child processes alike) go to the log file; `say` writes to the
terminal the process had when it opened. `verbose=True` (`-v`, or FACT_VERBOSE=1 in the
environment, which `fact optimize -v` sets) shows everything on the terminal as well and still
keeps the log. `step` shows one progress line per stage: a bar with the elapsed time, updated in
place on a terminal; elsewhere (CI, `| tee`, a notebook) one line when it ends, and one every
HEARTBEAT_SECONDS while it runs, so that a long step (Inductor's max-autotune) is never silent.

`default_log_path(name, out_dir)`: $FACT_LOG_DIR/<name>.log (set by `fact optimize` to
<out>/logs), else <out_dir>/logs/<name>.log.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Iterator, Optional

__all__ = ["RunLog", "default_log_path", "verbose_from_environment"]


def verbose_from_environment() -> bool:
    return os.environ.get("FACT_VERBOSE", "") not in ("", "0")


def _duration(seconds: float) -> str:
    """"42s", "3m05s" (the engine's progress lines spell it so too)."""
    seconds = round(max(0.0, seconds))
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


def default_log_path(name: str, out_dir: Path) -> Path:
    folder = os.environ.get("FACT_LOG_DIR")
    return (Path(folder) if folder else Path(out_dir) / "logs") / f"{name}.log"


class RunLog:
    """See the module doc. Re-entrant use is not supported; one RunLog per process at a time."""

    BAR_WIDTH = 20
    HEARTBEAT_SECONDS = 30.0  # not on a terminal: a line this often while a step runs

    def __init__(self, path: Path, verbose: bool = False, title: str = "fact",
                 mirror: Optional[Callable[[str], None]] = None):
        """`mirror`: also gets every line `say` writes (fact optimize: its optimize.log)."""
        self.path = Path(path)
        self.verbose = verbose
        self.title = title
        self.mirror = mirror
        self._terminal_out: Optional[int] = None
        self._terminal_err: Optional[int] = None
        self._log = None
        self._tee: Optional[threading.Thread] = None
        self._tee_write: Optional[int] = None
        self._lock = threading.Lock()
        self._live = False  # a progress line is on the terminal (no newline yet)

    # --- opening and closing ------------------------------------------------------------------
    def __enter__(self) -> "RunLog":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._log = open(self.path, "ab", buffering=0)
        self._log.write(f"\n===== {self.title} {time.strftime('%Y-%m-%d %H:%M:%S')} (pid {os.getpid()})\n".encode())
        self._terminal_out = os.dup(1)
        self._terminal_err = os.dup(2)
        if self.verbose:
            read_end, self._tee_write = os.pipe()
            target = self._tee_write
            self._tee = threading.Thread(target=self._copy, args=(read_end,), daemon=True)
            self._tee.start()
        else:
            target = self._log.fileno()
        os.dup2(target, 1)
        os.dup2(target, 2)
        return self

    def __exit__(self, kind, error, trace) -> bool:
        if error is not None and not isinstance(error, (KeyboardInterrupt, SystemExit)):
            self.failed(error)
        self.close()
        return False

    def close(self) -> None:
        if self._terminal_out is None:
            return
        self._end_live_line()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._terminal_out, 1)
        os.dup2(self._terminal_err, 2)
        if self._tee is not None:
            os.close(self._tee_write)
            self._tee.join(timeout=5)
        os.close(self._terminal_out)
        os.close(self._terminal_err)
        self._terminal_out = self._terminal_err = None
        self._log.close()

    def _copy(self, read_end: int) -> None:
        """verbose: everything written to fds 1 and 2 goes to the terminal and the log."""
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(65536)
                if not chunk:
                    return
                with self._lock:
                    self._log.write(chunk)
                    if self._terminal_out is not None:
                        os.write(self._terminal_out, chunk)

    # --- FACT's own lines ---------------------------------------------------------------------
    @property
    def is_terminal(self) -> bool:
        return self._terminal_out is not None and os.isatty(self._terminal_out)

    def say(self, text: str = "", error: bool = False) -> None:
        """A line (or lines) of FACT's output: on the terminal and in the log."""
        if self.mirror is not None:
            self.mirror(text.rstrip("\n"))
        if self._terminal_out is None:  # not open: plain print
            print(text, file=sys.stderr if error else sys.stdout, flush=True)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        data = (text.rstrip("\n") + "\n").encode()
        stream = sys.stderr if error else sys.stdout
        if stream is not (sys.__stderr__ if error else sys.__stdout__):
            # sys.stdout/err replaced (pytest's capsys, a notebook): FACT's lines go there.
            print(text.rstrip("\n"), file=stream, flush=True)
            with self._lock:
                self._log.write(data)
            return
        with self._lock:
            self._end_live_line()
            os.write(self._terminal_err if error else self._terminal_out, data)
            self._log.write(data)

    def failed(self, error: BaseException) -> None:
        """The traceback into the log; one line with the error and the log's path on the terminal."""
        with self._lock:
            self._log.write("".join(traceback.format_exception(type(error), error, error.__traceback__)).encode())
        first = str(error).splitlines()[0] if str(error) else ""
        self.say(f"{self.title}: error: {type(error).__name__}: {first} (traceback and full output: {self.path})",
                 error=True)

    # --- progress -----------------------------------------------------------------------------
    def _bar(self, index: int, total: int) -> str:
        if total <= 0:
            return ""
        filled = round(self.BAR_WIDTH * index / total)
        return f"[{'#' * filled}{'.' * (self.BAR_WIDTH - filled)}] {index}/{total} "

    def _end_live_line(self) -> None:
        if self._live and self._terminal_out is not None:
            os.write(self._terminal_out, b"\n")
        self._live = False

    @contextlib.contextmanager
    def step(self, label: str, index: int = 0, total: int = 0) -> Iterator[None]:
        """A stage with a progress line: `index` of `total` steps done before this one."""
        started = time.monotonic()
        stop = threading.Event()
        ticker = None
        if self.is_terminal and not self.verbose:
            def tick() -> None:
                while not stop.wait(0.5):
                    line = f"\r  {self._bar(index, total)}{label} … {time.monotonic() - started:.0f} s\033[K"
                    with self._lock:
                        if self._terminal_out is not None:
                            os.write(self._terminal_out, line.encode())
                            self._live = True
            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        elif self.verbose:
            self.say(f"  {self._bar(index, total)}{label} …")
        if not self.is_terminal and self._terminal_out is not None:
            def heartbeat() -> None:
                while not stop.wait(self.HEARTBEAT_SECONDS):
                    self.say(f"  {self._bar(index, total)}{label} … {_duration(time.monotonic() - started)} elapsed")
            ticker = threading.Thread(target=heartbeat, daemon=True)
            ticker.start()
        ok = False
        try:
            yield
            ok = True
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            seconds = time.monotonic() - started
            with self._lock:
                if self._live and self._terminal_out is not None:
                    os.write(self._terminal_out, b"\r\033[K")
                    self._live = False
            done = index + 1 if ok else index
            self.say(f"  {self._bar(done, total)}{label}: {'done' if ok else 'failed'} ({seconds:.1f} s)")
