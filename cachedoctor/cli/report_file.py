"""``--output FILE``: a report written whole or not at all (``scan``, ``repair``, ``recover``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO


def write_report(path: str, write: Callable[[TextIO], None]) -> str | None:
    """Write atomically (temp file beside it, then rename); an error message or ``None``."""
    from cachedoctor.atomic import atomic_text

    try:
        with atomic_text(path, prefix=".cachedoctor-report-") as out:
            write(out)
    except OSError as exc:
        return f"{path}: cannot write the report ({exc.strerror or exc}); choose another --output"
    return None


def check_writable(path: str) -> str | None:
    """Whether ``--output FILE`` can be written, asked before any work (a repair must not change
    a cache and then fail to say what it did): an error message or ``None``. Creates and removes
    a temp file in FILE's folder, the one the real write uses."""
    import os
    import tempfile

    if os.path.isdir(path):
        return f"{path}: is a folder; name a file for --output"
    if os.path.exists(path) and not os.path.isfile(path):  # a device or a pipe: written as it is
        return None if os.access(path, os.W_OK) else f"{path}: cannot write the report there; choose another --output"
    try:
        fd, probe = tempfile.mkstemp(prefix=".cachedoctor-report-", dir=os.path.dirname(os.path.abspath(path)))
    except OSError as exc:
        return f"{path}: cannot write the report there ({exc.strerror or exc}); choose another --output"
    os.close(fd)
    os.unlink(probe)
    return None


__all__ = ["check_writable", "write_report"]
