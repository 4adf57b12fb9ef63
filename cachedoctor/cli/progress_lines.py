"""The core's ``progress(stage, done, total)`` calls as plain lines on stderr, for logs.

A SLURM or nohup job sends stderr to a file, where a bar redrawn with ``\\r`` and cursor codes
is unreadable and, being erased at the end, leaves nothing: such a job used to see nothing
between repair's plan and its ``done:``. Here each stage gets one line when it starts, one
every ``interval`` seconds while it runs and one when it ends, each whole and plain (no ANSI
code, no ``\\r``), flushed at once::

    cachedoctor: repair: recompute 0/480 files (0%)
    cachedoctor: repair: recompute 120/480 files (25%), 4.1 files/s, ETA 1m28s
    cachedoctor: repair: recompute 480/480 files (100%), 4.1 files/s, took 1m57s

While a stage's total is not known yet (a first scan listing its cache) a line says
``1200 files so far``. The rate is the stage's average since it started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachedoctor.cli.environment import Environment

#: What a line counts in each stage (``cachedoctor.progress`` names the stages).
UNITS = {"plan": "findings"}


class ProgressLines:
    """A context manager like :class:`cachedoctor.cli.progress.ProgressLine`: ``with
    ProgressLines(env, "repair", 30) as progress:`` gives the callable for the core."""

    def __init__(
        self, env: Environment, command: str, interval: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.env, self.command, self.interval, self.clock = env, command, interval, clock
        self.stage: str | None = None
        self.started = self.last = 0.0
        self.done = 0
        self.shown: tuple[int, int | None] | None = None  # the last line's counts (one line per state)
        self._lock = threading.Lock()  # repair reports recomputes from its writer thread

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def pause(self) -> None:
        """Nothing to erase: a log keeps its lines."""

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if total == 0:  # nothing to count (an empty target, about to be reported)
            return
        with self._lock:
            now = self.clock()
            if stage != self.stage:
                self.stage, self.started, self.done, self.shown = stage, now, done, None
                self._say(stage, done, total, now)
                return
            if done < self.done:  # a call overtaken by a later one (another thread): already told
                return
            self.done = done
            ended = total is not None and done >= total
            if (ended or now - self.last >= self.interval) and self.shown != (done, total):
                self._say(stage, done, total, now)

    def _say(self, stage: str, done: int, total: int | None, now: float) -> None:
        self.last, self.shown = now, (done, total)
        unit = UNITS.get(stage, "files")
        if total is None:
            parts = [f"{stage} {done} {unit} so far"]
        else:
            parts = [f"{stage} {done}/{total} {unit} ({100 * done // total}%)"]
        elapsed = now - self.started
        if elapsed > 0 and done > 0:
            rate = done / elapsed
            parts.append(
                f"{rate:.0f} {unit}/s"
                if rate >= 100
                else f"{rate:.1f} {unit}/s"
                if rate >= 0.1
                else f"{rate:.2g} {unit}/s"
            )
            if total is not None and done >= total:
                parts.append(f"took {duration(elapsed)}")
            elif total is not None:
                parts.append(f"ETA {duration((total - done) / rate)}")
        try:  # the plan before the lines that follow it, when both go to one log
            self.env.stdout.flush()
        except (OSError, ValueError):  # a reader gone (``| head``): the next print says so, not this thread
            pass
        print(f"cachedoctor: {self.command}: {', '.join(parts)}", file=self.env.stderr, flush=True)


def duration(seconds: float) -> str:
    """``45s``, ``1m28s``, ``2h03m``: short enough for a log line, exact enough for a wait."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


__all__ = ["ProgressLines", "duration"]
