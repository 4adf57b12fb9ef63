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


__all__ = ["write_report"]
