"""Switching a SQLite database's journal mode when other processes may be opening it too.

SQLite answers ``PRAGMA journal_mode`` with "database is locked" at once, without calling the
busy handler, when two connections race to set the mode of a new database (each holds a shared
lock and wants an exclusive one: waiting could deadlock, so SQLite does not wait). Two repairs
or scans started together on one cache hit this on their first run. The busy timeout does not
help, so the switch is retried here, with a short back-off, for as long as that timeout.
"""

from __future__ import annotations

import random
import sqlite3
import time


def set_journal_mode(db: sqlite3.Connection, mode: str, patience_s: float) -> None:
    """``PRAGMA journal_mode = <mode>``, retried while another connection holds the lock."""
    deadline = time.monotonic() + patience_s
    pause = 0.005
    while True:
        try:
            db.execute(f"PRAGMA journal_mode = {mode}")
            return
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 0.25)
