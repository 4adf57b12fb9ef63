"""One lock per cache file, so two repairs (or a repair and a cooperating trainer) never write
one file at once: several ranks writing one file is exactly how SimpleTuner's text embeds got
``failed finding central directory``.

The convention, for anyone who wants to cooperate: before writing ``<folder>/<name>``, take an
exclusive ``flock`` on ``<folder>/.<name>.lock`` (``filelock.FileLock`` does exactly this).
Lock files stay after release, as filelock intends: deleting a lock file that another process
is waiting on would let two writers in. The scan ignores them (``statedir.is_lock_name``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.statedir import lock_path  # lock names: statedir.py (the scan skips them without importing repair)

if TYPE_CHECKING:
    from filelock import FileLock

LOCK_TIMEOUT_S = 120.0


def file_lock(path: str, timeout: float = LOCK_TIMEOUT_S) -> FileLock:
    """A ``filelock.FileLock`` for ``path`` (use as a context manager; raises ``Timeout``)."""
    from filelock import FileLock

    return FileLock(lock_path(path), timeout=timeout)
