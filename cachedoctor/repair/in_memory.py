"""The scan's reading and judging of one file, on bytes repair already holds in memory.

A lossless rewrite reads each old file once and judges its new bytes before it writes them: the
restricted reader's verdict on the old bytes (``torch_io.load_checked``) and the deep read and
file checks on the new ones (``verify.problems_of``) run on those bytes instead of opening the
file again. They are exactly what :func:`cachedoctor.formats.read_file` and
:func:`cachedoctor.scan.inspect_file` do once the bytes are read (the readers on a
``BufferSource``, then the scan's judgement), reached through their internals: where those are
not there (the scan engine changed), the file itself is read as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.formats import read_file
from cachedoctor.formats.interface import FileMeta, ReadError

if TYPE_CHECKING:
    from cachedoctor.scan.outcome import Outcome


def meta_of(path: str, data: bytes | None, deep: bool) -> FileMeta | None:
    """``read_file(path, deep=deep)`` of ``data`` (``None``: of the file at ``path``)."""
    dispatch = _readers()
    if data is None or dispatch is None:
        return read_file(path, deep=deep)
    from cachedoctor.formats._source import BufferSource

    try:
        return dispatch(path, BufferSource(data), deep)
    except MemoryError:  # as read_file says it
        raise ReadError("too-large", "file structure asks for more memory than is available") from None


def outcome_of(path: str, data: bytes) -> Outcome:
    """``inspect_file(path, deep=True)`` as if ``data`` were the file at ``path`` (the file the
    new bytes will be once renamed into place)."""
    from cachedoctor.checks import Inspected
    from cachedoctor.scan.outcome import Outcome

    judge = _judge()
    if judge is None or _readers() is None:
        raise LookupError("the scan's internals moved")  # (the caller reads a written file instead)
    try:
        meta = meta_of(path, data, True)
    except ReadError as exc:
        return judge(Inspected(path, len(data), error=exc), None, 0)
    if meta is None:
        return Outcome(path, len(data), "skipped")
    return judge(Inspected(path, meta.size, meta=meta), meta.format, 0)


def _readers():  # type: ignore[no-untyped-def]
    try:
        from cachedoctor.formats import _dispatch
    except ImportError:
        return None
    return _dispatch


def _judge():  # type: ignore[no-untyped-def]
    try:
        from cachedoctor.scan.worker import _judge as judge
    except ImportError:
        return None
    return judge


__all__ = ["meta_of", "outcome_of"]
