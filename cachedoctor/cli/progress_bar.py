"""The rich progress bar behind :class:`cachedoctor.cli.progress.ProgressLine`: its columns.

A module of its own so that rich's progress machinery is imported only when a line is drawn.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeRemainingColumn
from rich.text import Text


def new_bar(console: Console) -> Progress:
    """``scanning [bar] 1,234/5,678 files 250/s 0:00:12``, erased when it stops."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        _Count(),
        _Rate(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,  # stdout is the report's; nothing else may be drawn there
        redirect_stderr=False,
    )


class _Count(ProgressColumn):
    """``1,234/5,678 files``, or ``1,234 files`` while the total is unknown."""

    def render(self, task: Task) -> Text:
        done = f"{int(task.completed):,}"
        text = f"{done}/{int(task.total):,}" if task.total is not None else done
        return Text(f"{text} {task.fields.get('unit', 'files')}")


class _Rate(ProgressColumn):
    """``250/s``: items per second over the last half minute (blank until there is a rate)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "")
