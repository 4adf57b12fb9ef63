"""How long work says how far it has got, without printing anything itself.

A scan or a repair takes an optional ``progress(stage, done, total)`` callable and calls it as it
goes; the CLI draws it (``cli/progress.py``), a library caller may log it, and the core never
prints. ``total`` is ``None`` while it is not known yet (a first scan listing a cache it has no
record of); ``done`` reaches ``total`` when the stage ends. Calls may come from another thread
than the caller's (repair records a recompute's result from its writer thread).

The stages, in the order a repair runs them (a scan has the first two):

* ``list``: counting a cache's files before reading them, for the scan's total (only when a
  progress callable is given and no state database knows the count from the last scan)
* ``scan``: files judged (``rescan``: the same, for repair's check of its own work)
* ``plan``: findings turned into actions
* ``lossless``: lossless rewrites, quarantine moves and clean-ups, one item at a time
* ``recompute``: items encoded again and written, batch by batch
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: ``progress(stage, done, total)``; ``total`` is ``None`` while unknown.
Progress = Callable[[str, int, "int | None"], None]

LIST, SCAN, PLAN, LOSSLESS, RECOMPUTE, RESCAN = "list", "scan", "plan", "lossless", "recompute", "rescan"
STAGES = (LIST, SCAN, PLAN, LOSSLESS, RECOMPUTE, RESCAN)


class Stages:
    """Counts items into ``progress`` calls, stage by stage (a no-op without a callable)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self._lock = threading.Lock()
        self._done: dict[str, int] = {}
        self._total: dict[str, int] = {}

    def start(self, stage: str, total: int) -> None:
        """``stage`` begins with ``total`` items (none: it is not shown at all)."""
        if total == 0:
            return
        with self._lock:
            self._done[stage], self._total[stage] = 0, total
        if self.progress is not None:
            self.progress(stage, 0, total)

    def step(self, stage: str) -> None:
        """One more item of ``stage`` is finished."""
        if self.progress is None or stage not in self._total:
            return
        with self._lock:
            self._done[stage] += 1
            done, total = self._done[stage], self._total[stage]
        self.progress(stage, done, total)

    def finish(self, stage: str) -> None:
        """``stage`` is over: done is its total."""
        total = self._total.get(stage)
        if self.progress is not None and total is not None:
            self.progress(stage, total, total)

    def renamed(self, stage: str) -> Progress | None:
        """The callable a scan gets so that its ``scan`` stage is reported as ``stage``."""
        progress = self.progress
        if progress is None:
            return None
        return lambda name, done, total: progress(stage if name == SCAN else name, done, total)


__all__ = ["LIST", "LOSSLESS", "PLAN", "RECOMPUTE", "RESCAN", "SCAN", "STAGES", "Progress", "Stages"]
