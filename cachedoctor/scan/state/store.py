"""The incremental state: what each file looked like when it was last read, and what the read found.

A rescan stats every file and reads again only those whose size, mtime, ctime or inode changed
(restic's change test; ctime catches a tool that writes and then restores the mtime). A folder
whose whole listing is unchanged is not even decoded file by file: its recorded result (every
file's findings plus the peer checks) comes back with one query, which is what makes a rescan
of an unchanged cache cost about one ``stat`` walk.

SQLite in WAL mode with a busy timeout, written in short ``BEGIN IMMEDIATE`` batches, so two
scans of one cache at once neither corrupt it nor starve each other (on a network file system,
where WAL is unsafe across machines, a rollback journal: see ``fsinfo.py``). The database sits inside
the cache, so it is as untrusted as the cache files: JSON only, never pickles; every row carries
a seal (an xxh3 of its fields), so a flipped byte that still decodes is a row to read again, not
a wrong finding; one written by another cachedoctor is emptied.

Faults (``faults.py``): the state only saves work, so it never stops a scan. A database that does
not open is moved aside (``state.sqlite.broken-<time>``) and rebuilt (``db.py``). Any SQLite
error after that (a damaged page, a row that does not decode, an I/O error) moves it aside too,
says so in a note, and the scan finishes without it; the next scan starts a new one. A full
disk moves nothing: the note says so, and the database stays as its last commit left it.

Racy entries (git's "racy git"): a file changed in the same clock tick as its recorded mtime
cannot be told from the recorded version by its stat. Each scan first touches a clock file
beside the database; a file whose mtime is not older than that tick is recorded as racy and
read again by the next scan.

A sharded scan keeps one database per shard (``statedir.sharded_path``); one that has no
finished scan yet takes the rows of a folder it lacks from the other splits' databases
(:attr:`StateStore.donors`, ``splits.py``), so a scan split another way starts warm.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterable
from typing import NamedTuple

from cachedoctor import __version__
from cachedoctor.errors import PathError
from cachedoctor.faults import is_full, move_aside, reason
from cachedoctor.scan.state.db import connect, guarded, immediate, seal, unseal
from cachedoctor.scan.state.places import default_path as default_path
from cachedoctor.scan.state.sigs import Sig, sig_of
from cachedoctor.scan.state.sigs import sig_of_info as sig_of_info
from cachedoctor.statedir import STATE_FILE, clock_path
from cachedoctor.stores.interface import is_remote

SCHEMA_VERSION = 3  # 2: sealed rows; 3: peer keys by key family (keynames), with the key held
_FLUSH_ROWS = 2000
_FLUSH_SECONDS = 0.25


class StateError(PathError):
    """A state database named with ``--state`` that cannot be used (exit 2)."""


#: A row whose seal does not hold: listed, never reused (no stat is -1).
DAMAGED = Sig(-1, -1, -1, -1)


class Row(NamedTuple):
    sig: Sig
    racy: bool
    deep_scan: int | None  # the scan that last read it deep (and found it as it is now)
    xxh3: str | None
    outcome: str


class Upsert(NamedTuple):
    name: str
    sig: Sig
    racy: bool
    deep_scan: int | None
    xxh3: str | None
    outcome: str


def producer_id() -> str:
    from cachedoctor.checks import KINDS

    return f"{SCHEMA_VERSION}|{__version__}|{','.join(sorted(KINDS))}"


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _refuse_foreign(path: str) -> None:
    """A ``--state`` path must be a state database or nothing yet: a damaged database is moved
    aside and rebuilt, but a folder (the cache itself, say) or another kind of file is the
    user's, and is never moved."""
    if os.path.isdir(path):
        raise StateError(
            path,
            "is a folder, not a state database; pass a file for --state "
            "(for example <folder>/state.sqlite) or --no-state",
        )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError:
        return  # unreadable: connecting says why, as one line
    if not stat.S_ISREG(mode):  # /dev/null, a FIFO: opening could block, and SQLite would replace it
        raise StateError(
            path,
            "is not a regular file (a device, FIFO or socket), so it cannot hold a state database; "
            "pass a file path for --state, or --no-state to keep none",
        )
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError:
        return  # unreadable: connecting says why, as one line
    if head and head != _SQLITE_MAGIC:
        raise StateError(
            path,
            "is not a SQLite database, and cachedoctor would have to replace it; "
            "pass another --state (a new file) or --no-state",
        )


class StateStore:
    """One state database; folders are keyed relative to ``base`` (absolute when ``base`` is empty)."""

    def __init__(self, path: str, base: str, db: sqlite3.Connection, clock_ns: int) -> None:
        self.path = path
        self.base = base
        self.db: sqlite3.Connection | None = db
        self.clock_ns = clock_ns
        self.scan_id = 0
        self.notes: list[str] = []  # what went wrong after opening (at most one: the store is then given up)
        self._pending: list[tuple[str, tuple]] = []
        self._flushed = time.monotonic()
        self._visited: set[bytes] = set()
        self._started = 0.0
        self._wrote = False
        self.created: bool = False  # made by this scan in a target's .cachedoctor/ (see ``discard``)
        self.made_dir: bool = False  # and that folder too
        self.cache_files = 0  # cache files this scan judged under it
        self.read_only = False  # a dry run's: read the record, never write it (``readonly.py``)
        #: Other splits' databases, read-only, while this one has no finished scan (``splits.py``)
        self.donors: list[StateStore] = []

    @classmethod
    def open(cls, path: str, base: str, *, explicit: bool) -> tuple[StateStore | None, str | None]:
        """The store and a note for the report. ``explicit`` (``--state``) turns "cannot" into
        :class:`StateError`; otherwise the scan goes on without state and says why."""
        db = None
        if explicit:
            _refuse_foreign(path)
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            db, note = connect(path, producer_id)
            clock = clock_path(path)
            with open(clock, "a"):
                pass
            os.utime(clock)  # now, by the file system's own clock and granularity
            clock_ns = os.stat(clock).st_mtime_ns
        except (OSError, sqlite3.Error) as exc:
            if db is not None:
                db.close()
            why = reason(exc)
            if explicit:
                raise StateError(
                    path, f"cannot use as the state database ({why}); pass another --state or --no-state"
                ) from None
            return None, (
                f"no state kept: cannot write {path} ({why}), so the next scan reads every file "
                "again; pass --state PATH on a writable disk, or --no-state"
            )
        return cls(path, base, db, clock_ns), note

    @property
    def alive(self) -> bool:
        return self.db is not None

    def _fail(self, exc: sqlite3.Error) -> None:
        """Give the database up for the rest of this scan: a full disk leaves it as its last
        commit did (still sound); anything else may be damage, so it is moved aside."""
        db, self.db = self.db, None
        self._pending.clear()
        if self.read_only:  # not ours to move aside in a dry run: go on without it
            if db is not None:
                db.close()
            self.notes.append(f"the state database {self.path} could not be read ({reason(exc)}); not used")
            return
        if db is not None:
            try:
                db.close()
            except sqlite3.Error:
                pass
        if is_full(exc, self.path):
            self.notes.append(
                f"no state kept: cannot write {self.path} ({reason(exc)}), so the next scan reads "
                "this scan's changes again; free some space, or pass --state PATH on another disk"
            )
            return
        try:
            aside = move_aside(self.path)
        except OSError as err:
            self.notes.append(
                f"the state database {self.path} failed ({reason(exc)}) and cannot be moved aside "
                f"({reason(err)}); this scan finished without it; delete it, or pass --no-state"
            )
            return
        self.notes.append(
            f"the state database {self.path} failed during the scan ({reason(exc)}); moved it to "
            f"{aside}; this scan finished without it, and the next one starts a new one"
        )

    # --- keys -------------------------------------------------------------------------------

    def key(self, folder: str) -> bytes:
        """A folder's key: bytes, as the file system has it (names need not be UTF-8). A URL's
        is cut as written: ``relpath`` would make ``a/..`` the prefix itself and ``a//`` ``a``."""
        if self.base and is_remote(folder):
            base = self.base.rstrip("/")
            return os.fsencode("." if folder == base else folder.removeprefix(base + "/"))
        return os.fsencode(os.path.relpath(folder, self.base) if self.base else folder)

    def covers(self, folder: str) -> bool:
        from cachedoctor.scan.walk import is_under

        return not self.base or folder == self.base or is_under(folder, self.base)

    # --- one scan ---------------------------------------------------------------------------

    @guarded(lambda: None)
    def begin(self) -> None:
        """Number this scan (its deep reads are stamped with it; the sample order follows it)."""
        self.flush()
        assert self.db is not None
        self.scan_id = int(self.db.execute("SELECT coalesce(max(id), 0) + 1 FROM scans").fetchone()[0])
        self._started = time.time()

    @guarded(lambda: None)
    def folder_result(self, folder: str, digest: str) -> str | None:
        assert self.db is not None
        key = self.key(folder)
        self._visited.add(key)
        row = self.db.execute("SELECT result FROM folders WHERE folder = ? AND digest = ?", (key, digest)).fetchone()
        return unseal(row[0], key, digest) if row else None

    @guarded(dict)
    def rows(self, folder: str) -> dict[str, Row]:
        assert self.db is not None
        key = self.key(folder)
        self._visited.add(key)
        out = {}
        for name, size, mtime, ctime, ino, racy, deep_scan, xxh3, outcome in self.db.execute(
            "SELECT name, size, mtime_ns, ctime_ns, ino, racy, deep_scan, xxh3, outcome FROM files WHERE folder = ?",
            (key,),
        ):
            text = unseal(outcome, key, name, size, mtime, ctime, ino, racy, deep_scan, xxh3)
            if text is None:  # damaged: listed (so a vanished file's row is deleted), never reused
                out[os.fsdecode(name)] = Row(DAMAGED, True, None, None, "")
            else:
                out[os.fsdecode(name)] = Row(Sig(size, mtime, ctime, ino), bool(racy), deep_scan, xxh3, text)
        if not out and self.donors:  # a folder this database never saw: another split's record of it
            return self._borrowed(folder)
        return out

    @guarded(lambda: True)
    def finished_any(self) -> bool:
        """Whether a scan was ever recorded finished here (else other splits' rows may serve)."""
        assert self.db is not None
        return self.db.execute("SELECT 1 FROM scans WHERE finished IS NOT NULL LIMIT 1").fetchone() is not None

    def _borrowed(self, folder: str) -> dict[str, Row]:
        """The sound rows of ``folder`` in the first of :attr:`donors` that has any, copied into
        this database once the scan has begun; their ``deep_scan`` (another database's scan
        number) taken as 0, older than any scan here (``splits.py``)."""
        for donor in self.donors:
            rows = {
                name: row._replace(deep_scan=None if row.deep_scan is None else 0)
                for name, row in donor.rows(folder).items()
                if row.sig != DAMAGED
            }
            if rows:
                if self.scan_id and not self.read_only:  # begun: a --sample choice before it only reads
                    key = self.key(folder)
                    for name, row in rows.items():
                        self._queue(key, Upsert(name, *row))
                    self._flush_due()
                return rows
        return {}

    def is_racy(self, mtime_ns: int, ctime_ns: int) -> bool:
        """Changed in the clock tick this scan began: the stat cannot vouch for the content."""
        return mtime_ns >= self.clock_ns or ctime_ns >= self.clock_ns

    @guarded(lambda: None)
    def save(
        self, folder: str, upserts: list[Upsert], gone: Iterable[str], digest: str | None, result: str | None
    ) -> None:
        """Record a folder's fresh reads; ``digest``/``result`` when the whole folder is settled."""
        key = self.key(folder)
        self._visited.add(key)
        pending = self._pending
        for u in upserts:
            self._queue(key, u)
        for gone_name in gone:
            pending.append(("DELETE FROM files WHERE folder = ? AND name = ?", (key, os.fsencode(gone_name))))
        if digest is not None and result is not None:
            pending.append(
                (
                    "INSERT OR REPLACE INTO folders VALUES (?,?,?,?)",
                    (key, digest, seal(key, digest, result) + "|" + result, self.scan_id),
                )
            )
        else:
            pending.append(("DELETE FROM folders WHERE folder = ?", (key,)))
        self._flush_due()

    def _flush_due(self) -> None:
        if len(self._pending) >= _FLUSH_ROWS or time.monotonic() - self._flushed > _FLUSH_SECONDS:
            self.flush()

    def _queue(self, key: bytes, u: Upsert) -> None:
        name, racy = os.fsencode(u.name), int(u.racy)
        sealed = seal(key, name, *u.sig, racy, u.deep_scan, u.xxh3, u.outcome) + "|" + u.outcome
        self._pending.append(
            (
                "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (key, name, *u.sig, racy, self.scan_id, u.deep_scan, u.xxh3, sealed),
            )
        )

    @guarded(lambda: None)
    def flush(self) -> None:
        if self.read_only:
            self._pending.clear()
            return
        if self._pending:
            assert self.db is not None
            with immediate(self.db):
                for sql, params in self._pending:
                    self.db.execute(sql, params)
            self._pending.clear()
            self._wrote = True
        self._flushed = time.monotonic()

    @guarded(lambda: None)
    def finish(self, walked: list[str], deep: bool, sample: str | None, files: int, reread: int, findings: int) -> None:
        """Forget folders under the fully walked ``walked`` targets that this scan did not see,
        and record the scan in ``scans``; a scan that changed nothing writes nothing at all."""
        self.flush()
        if self.db is None or self.read_only:
            return
        keys = [self.key(t) for t in walked]
        gone = [f for f in self._recorded_folders() if f not in self._visited and any(_under(f, k) for k in keys)]
        if not gone and not self._wrote:
            return
        with immediate(self.db):
            for folder in gone:
                self.db.execute("DELETE FROM files WHERE folder = ?", (folder,))
                self.db.execute("DELETE FROM folders WHERE folder = ?", (folder,))
            self.db.execute(
                "INSERT OR REPLACE INTO scans VALUES (?,?,?,?,?,?,?,?)",
                (self.scan_id, self._started, time.time(), int(deep), sample, files, reread, findings),
            )

    @guarded(lambda: None)
    def recorded_files(self) -> int | None:
        """How many files the last recorded scan saw (a progress total: one row, no walk)."""
        assert self.db is not None
        row = self.db.execute("SELECT files FROM scans ORDER BY id DESC LIMIT 1").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def _recorded_folders(self) -> list[bytes]:
        """Every folder with rows, by a skip scan of the primary key (not a read of every row)."""
        assert self.db is not None
        return [
            f
            for (f,) in self.db.execute(
                "WITH RECURSIVE f(folder) AS (SELECT min(folder) FROM files UNION ALL "
                "SELECT (SELECT min(folder) FROM files WHERE folder > f.folder) FROM f WHERE f.folder IS NOT NULL) "
                "SELECT folder FROM f WHERE folder IS NOT NULL"
            )
        ]

    def discard(self) -> None:
        """Remove a database this scan created (after :meth:`close`) because it found no cache
        file to record: a folder of images, or an empty one, keeps no ``.cachedoctor/``."""
        if not self.created or self.db is not None:
            return
        for path in (self.path, *(self.path + s for s in ("-wal", "-shm", "-journal")), clock_path(self.path)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                return  # left as it is: a later scan uses it
        if self.made_dir:
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass  # not empty (a quarantine, a journal) or not ours to remove

    def close(self) -> None:
        self.flush()
        for donor in self.donors:
            donor.close()
        self.donors = []
        db, self.db = self.db, None
        if db is not None:
            try:
                db.close()
            except sqlite3.Error as exc:
                self._fail(exc)

    # --- sampled deep reads -----------------------------------------------------------------

    @guarded(lambda: 0)
    def choose(self, candidates: Iterable[tuple[str, str, int, int, int]], parts: int, of: int) -> int:
        """Pick ``parts/of`` of the candidates ``(folder, name, tier, last_deep, order)`` to read deep:
        tier 0 (never read deep, or changed since) first, then the longest ago, then a fixed
        hash order. Each deep read moves a file to the back, so the sample rotates."""
        db = self.db
        assert db is not None
        db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS candidates (folder BLOB, name BLOB, tier INTEGER, "
            "last_deep INTEGER, ord INTEGER)"
        )
        db.execute(
            "CREATE TEMP TABLE IF NOT EXISTS chosen (folder BLOB, name BLOB, PRIMARY KEY (folder, name)) WITHOUT ROWID"
        )
        db.execute("DELETE FROM temp.candidates")
        db.execute("DELETE FROM temp.chosen")
        db.executemany(
            "INSERT INTO temp.candidates VALUES (?,?,?,?,?)",
            ((self.key(f), os.fsencode(n), t, d, o) for f, n, t, d, o in candidates),
        )
        total = db.execute("SELECT count(*) FROM temp.candidates").fetchone()[0]
        budget = -(-total * parts // of)  # ceil: a 5% sample of 10 files reads one
        db.execute(
            "INSERT INTO temp.chosen SELECT folder, name FROM temp.candidates ORDER BY tier, last_deep, ord LIMIT ?",
            (budget,),
        )
        db.execute("DELETE FROM temp.candidates")
        return budget

    @guarded(set)
    def chosen(self, folder: str) -> set[str]:
        assert self.db is not None
        return {
            os.fsdecode(n)
            for (n,) in self.db.execute("SELECT name FROM temp.chosen WHERE folder = ?", (self.key(folder),))
        }


def _under(folder: bytes, key: bytes) -> bool:
    return key == b"." or folder == key or folder.startswith(key.rstrip(b"/") + b"/")


__all__ = ["DAMAGED", "STATE_FILE", "Row", "Sig", "StateError", "StateStore", "Upsert", "default_path", "sig_of"]
