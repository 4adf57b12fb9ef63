"""Draw the core's ``progress(stage, done, total)`` calls as one rich line on stderr.

Only when :attr:`Environment.show_progress` holds (stderr is a terminal and no ``-q``), so
machine formats, pipes and CI logs never get it; stdout is never touched. The line shows the
stage, a bar, ``done/total`` files, the rate and the time left; while the total is not known
(a first scan still listing its cache) the bar pulses and only the count grows.

``pause()`` erases the line before anything else is written to the terminal (repair's plan, its
"Go ahead?"); the next call draws it again. Commands import this module (and so rich) inside
themselves, when they run, so that ``--version`` and ``explain`` do not pay for it; rich's
progress module itself (about 40 ms) is imported only when a line is first drawn, so a scan in a
pipe or a CI job never loads it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cachedoctor.cli.environment import Environment

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: What each stage is called on the line (``cachedoctor.progress`` names them).
LABELS = {
    "list": "listing",
    "scan": "scanning",
    "plan": "planning",
    "lossless": "rewriting",
    "recompute": "recomputing",
    "rescan": "checking again",
}
#: What the line counts in each stage.
UNITS = {"plan": "findings"}


class ProgressLine:
    """A context manager; ``with ProgressLine(env) as progress:`` gives the callable for the core,
    or ``None`` when nothing is to be shown (then the core skips its listing for the total)."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.stage: str | None = None
        self._lock = threading.Lock()  # repair reports recomputes from its writer thread

    def __enter__(self) -> ProgressLine | None:
        return self if self.env.show_progress else None

    def __exit__(self, *exc: object) -> None:
        self.pause()

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if total == 0:  # nothing to count (an empty target, about to be reported): no bar
            return
        with self._lock:
            if self.bar is None:
                self.bar = self._start()
            if self.task is None or stage != self.stage:
                if self.task is not None:
                    self.bar.remove_task(self.task)
                self.stage = stage
                self.task = self.bar.add_task(LABELS.get(stage, stage), total=total, unit=UNITS.get(stage, "files"))
            self.bar.update(self.task, completed=done, total=total)
            if total is None:  # rich's update() keeps the old total for None: unknown must show as unknown
                for task in self.bar.tasks:
                    if task.id == self.task:
                        task.total = None

    def pause(self) -> None:
        """Erase the line (it comes back with the next call)."""
        with self._lock:
            if self.bar is not None:
                self.bar.stop()
            self.bar, self.task, self.stage = None, None, None

    def _start(self) -> Progress:
        from cachedoctor.cli.progress_bar import new_bar

        bar = new_bar(self.env.console(self.env.stderr, live=True))
        bar.start()
        return bar


__all__ = ["LABELS", "ProgressLine"]
