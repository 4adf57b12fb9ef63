"""Opening the state database: WAL (a rollback journal on network file systems), our tables,
and a fresh start for a file that is not a usable database.

Split from ``state.py``, which holds what one scan does with it; the seals and the guard that
every one of its queries runs under are here too. A damaged database is moved
aside (``faults.move_aside``: ``state.sqlite.broken-<time>``, kept for a post-mortem) rather
than deleted; a full disk is not damage, and moves nothing.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from cachedoctor.faults import is_full, move_aside
from cachedoctor.fsinfo import is_network
from cachedoctor.sqlite_mode import set_journal_mode

_BUSY_MS = 60_000

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scans (id INTEGER PRIMARY KEY, started REAL, finished REAL, deep INTEGER,
    sample TEXT, files INTEGER, reread INTEGER, findings INTEGER);
CREATE TABLE IF NOT EXISTS files (folder BLOB, name BLOB, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER,
    ino INTEGER, racy INTEGER, scan INTEGER, deep_scan INTEGER, xxh3 TEXT, outcome TEXT,
    PRIMARY KEY (folder, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS folders (folder BLOB PRIMARY KEY, digest TEXT, result TEXT, scan INTEGER) WITHOUT ROWID;
"""


class immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: take the write lock up front, so a waiting writer
    queues on the busy timeout instead of failing on a lock upgrade."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def connect(path: str, producer_id: Callable[[], str]) -> tuple[sqlite3.Connection, str | None]:
    """Open (creating, or rebuilding one that is not a usable database) with WAL and our tables."""
    note = None
    try:
        return _prepare(path, producer_id), None
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise
        if is_full(exc, path):
            raise  # not damage: the caller scans on without state
        aside = move_aside(path)
        note = f"the state database {path} could not be read ({exc}); moved it to {aside} and started a new one"
    return _prepare(path, producer_id), note


def _prepare(path: str, producer_id: Callable[[], str]) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
        set_journal_mode(db, "DELETE" if is_network(os.path.dirname(path)) else "WAL", _BUSY_MS / 1000)
        db.execute("PRAGMA synchronous = NORMAL")
        producer = producer_id()
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'producer'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            row = None  # a new database
        if row is not None and row[0] == producer:
            return db  # the common case: nothing to write
        with immediate(db):
            for statement in _TABLES.strip().split(";"):
                if statement.strip():
                    db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE key = 'producer'").fetchone()
            if row is None or row[0] != producer:  # another version's outcomes: start over
                db.execute("DELETE FROM files")
                db.execute("DELETE FROM folders")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('producer', ?)", (producer,))
    except BaseException:
        db.close()
        raise
    return db


def seal(*fields: object) -> str:
    """A row's seal: 16 hex digits of xxh3 over its fields, checked on every read."""
    import xxhash

    return xxhash.xxh3_64_hexdigest(repr(fields).encode("utf-8", "surrogateescape"))


def unseal(text: object, *fields: object) -> str | None:
    """The text under a valid seal, or ``None`` (damaged: read the file again)."""
    if not isinstance(text, str) or len(text) < 17 or text[16] != "|":
        return None
    body = text[17:]
    return body if seal(*fields, body) == text[:16] else None


_T = TypeVar("_T")


def guarded(fallback: Callable[[], Any]) -> Callable[[_T], _T]:
    """Run a method of the store; on any SQLite error give the store up (the store's ``_fail``)
    and return ``fallback()``, what "no state" answers. A store given up answers that at once."""

    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.db is None:
                return fallback()
            try:
                return method(self, *args, **kwargs)
            except sqlite3.Error as exc:
                self._fail(exc)
                return fallback()

        return run

    return wrap


__all__ = ["connect", "guarded", "immediate", "seal", "unseal"]
