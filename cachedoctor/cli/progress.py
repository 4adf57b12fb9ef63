"""Draw the core's ``progress(stage, done, total)`` calls on stderr: ``--progress`` decides how.

``auto`` (the default): a rich line on a terminal (:class:`ProgressLine`), plain lines every
``--progress-interval`` seconds in a log, a file or pipe (``cli/progress_lines.py``), and nothing
with ``-q`` or beside a machine format on stdout. ``bar`` draws the line even when stderr is no
terminal (cursor codes and all: for a wrapper that renders them), ``lines`` writes lines even on
a terminal, ``none`` shows nothing; ``-q`` beats them all. stdout is never touched. The line
shows the stage, a bar, ``done/total`` files, the rate and the time left; while the total is not known
(a first scan still listing its cache) the bar pulses and only the count grows.

``pause()`` erases the line before anything else is written to the terminal (repair's plan, its
"Go ahead?"); the next call draws it again. This module imports no rich (the commands import it
for ``--progress``, and ``--version`` and ``explain`` must not pay for rich); rich's progress
module itself (about 40 ms) is imported only when a line is first drawn, so a scan in a pipe or a
CI job never loads it.
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cachedoctor.cli.environment import QUIET, Environment

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

    def __init__(self, env: Environment, *, force: bool = False) -> None:
        self.env = env
        self.force = force  # ``--progress bar``: drawn even when stderr is not a terminal
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.stage: str | None = None
        self._lock = threading.Lock()  # repair reports recomputes from its writer thread

    def __enter__(self) -> ProgressLine | None:
        return self if self.force or self.env.show_progress else None

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

        bar = new_bar(self.env.console(self.env.stderr, isatty=self.force or None, live=True))
        bar.start()
        return bar


class ProgressChoice(str, enum.Enum):
    """``--progress``: ``settings.PROGRESS_VALUES`` (settings show and the config file take them too)."""

    AUTO = "auto"
    BAR = "bar"
    LINES = "lines"
    NONE = "none"


ProgressOption = Annotated[
    ProgressChoice | None,
    typer.Option(
        "--progress",
        help="auto (a bar on a terminal, plain lines in a log file or pipe), bar, lines or none "
        "[default: auto]. -q shows none.",
        case_sensitive=False,
        show_default=False,
    ),
]
ProgressIntervalOption = Annotated[
    float | None,
    typer.Option(
        "--progress-interval",
        metavar="SECONDS",
        help="Lines mode: seconds between two lines of a stage (each stage's start and end have "
        "their own) [default: 30].",
        show_default=False,
    ),
]


class NoProgress:
    """Nothing shown: ``with NoProgress() as progress`` gives ``None`` (the core lists nothing twice)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        pass

    def pause(self) -> None:
        pass


def progress_display(env: Environment, settings: Any, command: str) -> Any:
    """What shows ``command``'s progress, as ``settings.progress`` and the streams decide: a
    :class:`ProgressLine`, a ``ProgressLines`` or :class:`NoProgress` (each a context manager
    giving the core's callable, with ``pause()``)."""
    mode = str(settings.progress.value)
    if env.quiet_asked or mode == ProgressChoice.NONE:
        return NoProgress()
    if mode == ProgressChoice.AUTO:
        if env.verbosity <= QUIET:  # a machine format on stdout: its document alone
            return NoProgress()
        if env.stderr_isatty:
            return ProgressLine(env)
        mode = ProgressChoice.LINES if env.stderr_is_log else ProgressChoice.NONE
    if mode == ProgressChoice.BAR:  # asked for: drawn whatever stderr is
        return ProgressLine(env, force=True)
    if mode == ProgressChoice.LINES:
        from cachedoctor.cli.progress_lines import ProgressLines

        return ProgressLines(env, command, float(settings.progress_interval.value))
    return NoProgress()


__all__ = [
    "LABELS",
    "NoProgress",
    "ProgressChoice",
    "ProgressIntervalOption",
    "ProgressLine",
    "ProgressOption",
    "progress_display",
]
