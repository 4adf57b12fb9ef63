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
