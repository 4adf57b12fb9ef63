"""What a reader raises when the bytes are not a readable file of their format, or cannot be had.

Why a module of its own: the lowest layers of the readers (``_source.py``: random access to the
bytes; the zip directory, members and inflation; the pickle verdicts) raise :class:`ReadError`,
and ``interface.py`` names ``Source`` in :class:`~cachedoctor.formats.interface.FormatReader`;
with the error here, below both, neither imports the other back. Both names are still
importable from ``interface.py`` and from ``cachedoctor.formats``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ReadError(Exception):
    """The file is not a readable file of the format its bytes (or name) claim.

    ``problem`` is a short stable code (``empty``, ``truncated``, ``bad-zip``,
    ``missing-data-pkl``, ``bad-pickle``, ``bad-header``, ``bad-gzip``, ``unknown-format``,
    ``too-large``, ``ambiguous-member``, ``legacy-tar``, and ``resource-bomb``, which the scan
    reports as ``unsafe-pickle``) and ``message`` a plain sentence for humans.
    """

    def __init__(self, problem: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.problem = problem
        self.message = message
        self.details = details

    # Keep ReadError picklable across scan workers despite kwargs.
    def __reduce__(self) -> tuple[Callable[..., ReadError], tuple[type[ReadError], str, str, dict[str, Any]]]:
        return (_rebuild_read_error, (type(self), self.problem, self.message, self.details))


def _rebuild_read_error(cls: type[ReadError], problem: str, message: str, details: dict[str, Any]) -> ReadError:
    return cls(problem, message, **details)


class UnreadableFile(ReadError):
    """The operating system would not give us the bytes (permissions, I/O error).

    Unlike other read errors this says nothing about the cache: the scan is incomplete, so
    it is reported as a could-not-run error (exit 2), not as a finding.
    """


__all__ = ["ReadError", "UnreadableFile"]
