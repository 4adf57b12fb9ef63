"""Problems that stop a command before it can run, each tied to one path.

The CLI prints every one the same way, ``<path>: <message>``, and exits 2; the message says
what to do. Subclasses only say where the problem arose.
"""

from __future__ import annotations


class PathError(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class UsageError(Exception):
    """Options that cannot go together or a value that makes no sense: one line, exit 2, like a
    :class:`PathError` but tied to no path."""


class RankStopped(BaseException):
    """A rank of a job split over ranks ends with exit 2: ``line`` is the one line to print, or
    ``None`` where another rank prints it (``sharding/ranks.py``). A ``BaseException``, as
    ``KeyboardInterrupt``: the scan's handlers that keep one bad file from stopping a scan must
    not take it for a bad file."""

    def __init__(self, line: str | None) -> None:
        super().__init__(line or "stopped: another rank reported why")
        self.line = line
