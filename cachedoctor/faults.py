"""The fault model: what a failure to write means, in one place.

Every write cachedoctor makes (state database, repair journal, quarantine, reports, manifests,
baselines) can fail because the disk is full, the file system returns an I/O error, or a
database file is damaged. The promise is the same everywhere: one line naming the path and what
to do, exit 2, nothing lost; never a traceback, never exit 1 (which means "findings"). The state
database is the one exception: it only saves work, so its failures become a note in the report
and the scan carries on without it (``scan/state.py``).

SQLite reports a full disk in two ways: ``SQLITE_FULL`` ("database or disk is full") when a
page cannot be written, and an I/O error (``SQLITE_IOERR_SHMSIZE``, ``..._WRITE``...) when the
WAL index or the WAL itself cannot grow. Only the free space tells the second from a failing
disk, so :func:`is_full` looks at it.
"""

from __future__ import annotations

import errno
import os

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13
_SQLITE_IOERR = 10
_LOW_SPACE = 1 << 20  # below this, an I/O error while growing a file is taken for a full disk


def _sqlite_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code if isinstance(code, int) else None


def is_sqlite(exc: BaseException) -> bool:
    """Whether ``exc`` comes from SQLite (without importing ``sqlite3`` where it is not needed)."""
    return any(c.__module__ == "sqlite3" for c in type(exc).__mro__)


def low_space(path: str) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing parent) is nearly full."""
    where = path
    while where and not os.path.exists(where):
        parent = os.path.dirname(where)
        if parent == where:
            break
        where = parent
    try:
        st = os.statvfs(where or ".")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _LOW_SPACE


def is_full(exc: BaseException, path: str) -> bool:
    """Whether ``exc``, raised while writing ``path``, means the disk (or the quota) is full."""
    if isinstance(exc, OSError):
        return exc.errno in _FULL_ERRNOS
    code = _sqlite_code(exc)
    if code is None:
        return False
    if code & 0xFF == _SQLITE_FULL:
        return True
    return code & 0xFF == _SQLITE_IOERR and low_space(path)


def reason(exc: BaseException) -> str:
    """The short cause for a message: ``No space left on device``, ``disk I/O error``."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    text = str(exc).split(" with text '")[0]  # SQLite quotes the undecodable bytes: noise in a one-liner
    return (text[:157] + "...") if len(text) > 160 else text or type(exc).__name__


def could_not_write(exc: BaseException, path: str, what: str, then: str) -> str:
    """One line (without the path) for a failed write of ``what`` at ``path``: the cause, and
    ``then``, what to do once it is fixed."""
    if is_full(exc, path):
        return f"no space left on the device for {what} ({reason(exc)}). Free some space, then {then}"
    return f"cannot write {what} ({reason(exc)}); check the disk, then {then}"


def move_aside(path: str) -> str:
    """Move a damaged SQLite database (and its ``-wal``/``-shm``) to ``<path>.broken-<time>``,
    kept for a post-mortem; where it went. A rename: it needs no free space."""
    import stat
    import time

    from cachedoctor.errors import PathError

    try:
        mode: int | None = os.lstat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # a device or FIFO named as a database is never moved
        raise PathError(path, "is not a regular file, so it is not a damaged database to move aside; pass another path")
    aside = f"{path}.broken-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while os.path.exists(aside):
        n += 1
        aside = f"{path}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(path + suffix, aside + suffix)
        except FileNotFoundError:
            pass
    return aside


def last_resort(exc: BaseException) -> str | None:
    """The one line for an ``OSError`` or SQLite error no handler closer to it caught (the CLI's
    safety net); ``None`` for anything else, which stays a bug with a traceback."""
    if isinstance(exc, OSError):
        path = exc.filename if isinstance(exc.filename, str) else None
        if exc.filename2 and isinstance(exc.filename2, str):
            path = f"{path} -> {exc.filename2}"
        then = "free some space" if exc.errno in _FULL_ERRNOS else "check the path and its disk"
        return f"{path or 'cachedoctor'}: {reason(exc)}; {then}, then run the same command again"
    if is_sqlite(exc):
        return f"cachedoctor: a database failed ({reason(exc)}); check the disk, then run the same command again"
    return None


__all__ = ["could_not_write", "is_full", "is_sqlite", "last_resort", "low_space", "move_aside", "reason"]
