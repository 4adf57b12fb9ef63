"""One lock per cache file, so two repairs (or a repair and a cooperating trainer) never write
one file at once: several ranks writing one file is exactly how SimpleTuner's text embeds got
``failed finding central directory``.

The convention, for anyone who wants to cooperate: before writing ``<folder>/<name>``, take an
exclusive ``flock`` on ``<folder>/.<name>.lock`` (``filelock.FileLock`` does exactly this).
Lock files stay after release, as filelock intends: deleting a lock file that another process
is waiting on would let two writers in. The scan ignores them (``statedir.is_lock_name``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from cachedoctor.statedir import lock_path  # lock names: statedir.py (the scan skips them without importing repair)

if TYPE_CHECKING:
    from filelock import FileLock

LOCK_TIMEOUT_S = 120.0


def file_lock(path: str, timeout: float = LOCK_TIMEOUT_S) -> FileLock:
    """A ``filelock.FileLock`` for ``path`` (use as a context manager; raises ``Timeout``)."""
    from filelock import FileLock

    return FileLock(lock_path(path), timeout=timeout)


@contextlib.contextmanager
def held(path: str, timeout: float = LOCK_TIMEOUT_S, before_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """The same lock as :func:`file_lock`, taken with one ``open`` and one ``flock`` when no one
    holds it (filelock's machinery costs about 0.2 ms a file, a third of a lossless rewrite's
    budget); when someone does, ``before_wait()`` runs (a batch releases the locks it holds, so
    two repairs never wait on each other's locks), then :func:`file_lock` waits, with its
    timeout. Both are an exclusive ``flock`` on the same file, so they exclude each other and any
    cooperating writer."""
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        fd = -1  # (a read-only folder: filelock says why, or waits, as before)
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            fd = -1
    if fd < 0:
        if before_wait is not None:
            before_wait()
        with file_lock(path, timeout):
            yield
        return
    try:
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
