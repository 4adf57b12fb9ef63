"""The state database as a dry run reads it: the record of the last scans, never written.

``repair --dry-run`` must plan what ``repair`` would (which reads unchanged files' deep results,
and their recorded digests, from ``scan``'s database), and change nothing in the cache folder.
SQLite's ``immutable`` read-only mode takes no lock and creates no ``-wal``/``-shm`` files; a row
a concurrent writer tore fails its seal and is read from the file again. It does not read a
write-ahead log, though, and one holds committed rows after a scan was killed or while another
runs: then the database is opened read-only through SQLite's locks (which may leave a ``-shm``
index beside it, never data).
"""

from __future__ import annotations

import os
import sqlite3
import time
from urllib.parse import quote

from cachedoctor.scan.state.store import StateStore, producer_id

#: Without touching the clock file, "now" stands in for the scan's start, less this: a file
#: changed within the last two seconds (a coarse file-system clock) is racy, and read again.
_CLOCK_SLACK_NS = 2_000_000_000


def open_read_only(path: str, base: str = "") -> StateStore | None:
    """The store at ``path`` opened read-only, or ``None`` when there is none this version of
    cachedoctor wrote (another version's rows are never reused) or it cannot be read."""
    if not os.path.isfile(path):
        return None
    try:
        wal = os.path.getsize(path + "-wal") > 0
    except OSError:
        wal = False
    db, row = _connect(path, wal)
    if row is None and wal:  # the log could not be read through the locks: the main file alone
        db, row = _connect(path, False)
    if db is None or row is None or row[0] != producer_id():
        if db is not None:
            db.close()
        return None
    store = StateStore(path, base, db, time.time_ns() - _CLOCK_SLACK_NS)
    store.read_only = True
    return store


def _connect(path: str, wal: bool) -> tuple[sqlite3.Connection | None, tuple | None]:
    mode = "mode=ro" if wal else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(f"file:{quote(path)}?{mode}", uri=True, check_same_thread=False)
    except sqlite3.Error:
        return None, None
    try:
        return db, db.execute("SELECT value FROM meta WHERE key = 'producer'").fetchone()
    except sqlite3.Error:
        db.close()
        return None, None


__all__ = ["open_read_only"]
