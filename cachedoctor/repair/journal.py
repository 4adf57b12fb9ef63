"""The repair journal: a SQLite database in ``<cache root>/.cachedoctor/`` recording every run,
every planned action and how far it got (planned, done, verified, skipped, blocked, failed).

After a crash the next ``repair`` finds the run still marked running with its process gone (or
marked interrupted: stopped by a full disk or a dead worker, both of which promise a resume),
resumes it under the same run id (one quarantine folder per logical repair), skips what was
verified, and does the rest. WAL mode and a busy timeout let two repairs, or the workers of one,
share the database. Under torchrun each rank keeps its own file (``journal-rank<k>.sqlite``): a
database shared over NFS by many hosts is not safe.

Faults (``faults.py``): any SQLite or OS error while writing the journal (a full disk, which
SQLite may report as ``SQLITE_FULL`` or as an I/O error on the WAL index; a damaged page) is a
:class:`RepairError` naming the journal, like a full disk under a cache file. A journal that
cannot be read when a repair looks for an interrupted run is :class:`JournalUnreadable`: it
may hold that run's history, so repair stops and says how to go on (``--fresh`` moves it aside).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from cachedoctor.faults import could_not_write, is_full, move_aside, reason
from cachedoctor.repair.model import Action, ItemResult, ItemState, RepairError
from cachedoctor.repair.scope import scope_keeps_blocked, scope_only
from cachedoctor.sqlite_mode import set_journal_mode
from cachedoctor.statedir import journal_path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, started REAL NOT NULL, finished REAL, status TEXT NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, pid_start TEXT, argv TEXT, encoder TEXT, fingerprint TEXT,
    scope TEXT
);
CREATE TABLE IF NOT EXISTS items (
    run_id TEXT NOT NULL, path TEXT NOT NULL, action TEXT NOT NULL, state TEXT NOT NULL,
    message TEXT, quarantined TEXT, updated REAL NOT NULL,
    PRIMARY KEY (run_id, path)
);
"""


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (so a recycled pid is not taken for a live repair)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(host: str, pid: int, pid_start: str | None) -> bool:
    if host != socket.gethostname():
        return True  # another machine's run: we cannot tell, so never steal it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid_start is None or process_start(pid) == pid_start


@dataclass(frozen=True, slots=True)
class Interrupted:
    run_id: str
    encoder: str | None  # the --encoder specs as a JSON list
    fingerprint: str | None
    verified: frozenset[str]
    unfinished: tuple[Action, ...]
    last_update: float = 0.0  # when the journal last heard from it: files newer than this are suspects
    recomputed: bool = False  # it wrote at least one recompute: a resume must use the same model
    scope: str | None = None  # what narrowed the run (``scope.run_scope``); ``None``: not recorded

    @property
    def only(self) -> frozenset[str] | None:
        return scope_only(self.scope)

    @property
    def keep_blocked(self) -> bool:
        return scope_keeps_blocked(self.scope)

    @property
    def encoders(self) -> tuple[str, ...]:
        """The run's ``--encoder`` specs, so a resume can use the same ones."""
        if not self.encoder:
            return ()
        try:
            specs = json.loads(self.encoder)
        except ValueError:
            return ()
        return tuple(str(s) for s in specs) if isinstance(specs, list) else ()


def interrupted_run(root: str, rank: int | None = None) -> Interrupted | None:
    """The interrupted run recorded under ``root``, if any, without creating anything."""
    if not os.path.exists(journal_path(root, rank)):
        return None
    path = journal_path(root, rank)
    try:
        journal = Journal(root, rank)
    except RepairError as exc:
        raise unreadable(path, exc.__context__ or exc) from None
    try:
        return journal.interrupted()
    except sqlite3.Error as exc:
        raise unreadable(path, exc) from None
    finally:
        journal.close()


def holds_no_open_run(root: str, rank: int | None = None) -> bool:
    """Whether a journal that failed to open can still be read far enough to show that no run in
    it is unfinished (then it holds nothing to resume, and can be moved aside without asking)."""
    try:
        db = sqlite3.connect(f"file:{journal_path(root, rank)}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return False
    try:
        (open_runs,) = db.execute("SELECT count(*) FROM runs WHERE status IN ('running', 'interrupted')").fetchone()
        db.execute("SELECT count(*) FROM items").fetchone()
        return open_runs == 0
    except sqlite3.Error:
        return False
    finally:
        db.close()


class JournalUnreadable(RepairError):
    """The journal cannot be read: an interrupted run in it can be neither resumed nor ruled out."""


@contextlib.contextmanager
def _guard(path: str) -> Iterator[None]:
    """Any failure to write the journal as the one-line could-not-run error, not a traceback."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise RepairError(
            path,
            could_not_write(exc, path, "the repair journal", "run the same `cachedoctor repair` again: it resumes"),
        ) from None


def unreadable(path: str, exc: BaseException) -> RepairError:
    """Why a journal could not be read, and what to do: free space, or ``--fresh``."""
    if is_full(exc, path):
        return RepairError(path, could_not_write(exc, path, "the repair journal", "run the same command again"))
    return JournalUnreadable(
        path,
        f"cannot read the repair journal ({reason(exc)}), which may hold an interrupted "
        "repair; run the same `cachedoctor repair` with --fresh to move the journal aside "
        "and start a new run (the quarantine stays)",
    )


def move_journal_aside(root: str, rank: int | None = None) -> str:
    """An unreadable journal (``repair --fresh``, or no unfinished run in it): keep it for a
    post-mortem and start a new one; where it went."""
    return move_aside(journal_path(root, rank))


def abandon(root: str, rank: int | None, run_id: str) -> None:
    """Mark an interrupted run as given up (``repair --fresh``); its quarantine stays."""
    finish_run(root, rank, run_id, "abandoned")


def finish_run(root: str, rank: int | None, run_id: str, status: str) -> None:
    """Close ``run_id`` in ``root``'s journal, if there is one, with ``status``."""
    if not os.path.exists(journal_path(root, rank)):
        return
    journal = Journal(root, rank)
    try:
        journal.run_id = run_id
        journal.finish(status)
    finally:
        journal.close()


class Journal:
    def __init__(self, root: str, rank: int | None = None) -> None:
        self.path = journal_path(root, rank)
        with _guard(self.path):
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            # Used by one thread at a time (the main thread, then recompute's writer thread).
            self.db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            try:
                self.db.execute("PRAGMA busy_timeout=60000")
                set_journal_mode(self.db, "WAL", 60.0)
                # NORMAL in WAL mode survives any process crash (SIGKILL, OOM) with the database
                # consistent; a power cut may lose the last rows, which the next run's fresh scan makes up for.
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(_SCHEMA)
                columns = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}
                if "scope" not in columns:  # a journal written before runs recorded their scope
                    self.db.execute("ALTER TABLE runs ADD COLUMN scope TEXT")
            except BaseException:
                self.close()
                raise
        self.run_id: str | None = None

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()

    def interrupted(self) -> Interrupted | None:
        """The newest run that is marked running (or interrupted) but whose process is gone."""
        rows = self.db.execute(
            "SELECT run_id, host, pid, pid_start, encoder, fingerprint, scope FROM runs "
            "WHERE status IN ('running', 'interrupted') ORDER BY started DESC"
        ).fetchall()
        for run_id, host, pid, pid_start, encoder, fingerprint, scope in rows:
            if process_alive(host, pid, pid_start):
                continue
            items = self.db.execute("SELECT path, action, state FROM items WHERE run_id = ?", (run_id,)).fetchall()
            (last,) = self.db.execute("SELECT MAX(updated) FROM items WHERE run_id = ?", (run_id,)).fetchone()
            verified = frozenset(p for p, _a, s in items if s in (ItemState.VERIFIED.value, ItemState.SKIPPED.value))
            unfinished = tuple(
                Action.from_json(a) for _p, a, s in items if s in (ItemState.PLANNED.value, ItemState.DONE.value)
            )
            recomputed = any(
                s == ItemState.VERIFIED.value and '"kind": "recompute"' in a for _p, a, s in items
            )  # the action JSON is written with sort_keys: "kind": "recompute" when it was one
            return Interrupted(
                run_id, encoder, fingerprint, verified, unfinished, float(last or 0.0), recomputed, scope
            )
        return None

    def start(
        self,
        run_id: str,
        argv: list[str],
        encoder: str | None,
        fingerprint: str | None,
        resumed: bool,
        scope: str | None = None,
    ) -> None:
        """Record the run (``scope``: ``scope.run_scope``); a resumed one is taken over."""
        self.run_id = run_id
        pid = os.getpid()
        with _guard(self.path), self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO runs "
                "(run_id, started, status, host, pid, pid_start, argv, encoder, fingerprint, scope) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    time.time(),
                    socket.gethostname(),
                    pid,
                    process_start(pid),
                    json.dumps(argv),
                    encoder,
                    fingerprint,
                    scope,
                ),
            )
            if resumed:  # the run goes on under this process (another root may not know it yet: inserted above)
                self.db.execute(
                    "UPDATE runs SET status='running', host=?, pid=?, pid_start=?, encoder=?, fingerprint=?, "
                    "scope=COALESCE(?, scope) WHERE run_id=?",
                    (socket.gethostname(), pid, process_start(pid), encoder, fingerprint, scope, run_id),
                )

    def plan(self, actions: list[Action]) -> None:
        """Record every action before the first change (an existing row keeps its state)."""
        now = time.time()
        with _guard(self.path), self.db:
            self.db.execute("BEGIN IMMEDIATE")  # one transaction for the whole plan (autocommit would commit per row)
            self.db.executemany(
                "INSERT OR IGNORE INTO items (run_id, path, action, state, updated) VALUES (?, ?, ?, ?, ?)",
                [(self.run_id, a.path, a.to_json(), ItemState.PLANNED.value, now) for a in actions],
            )

    def record(self, result: ItemResult) -> None:
        with _guard(self.path), self.db:
            self.db.execute(
                "UPDATE items SET state=?, message=?, quarantined=COALESCE(?, quarantined), updated=? "
                "WHERE run_id=? AND path=?",
                (result.state.value, result.message, result.quarantined, time.time(), self.run_id, result.path),
            )

    def record_many(self, results: list[ItemResult]) -> None:
        """Several results in one transaction (a batch of rewrites: one commit, not one a file)."""
        if not results:
            return
        now = time.time()
        with _guard(self.path), self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(
                "UPDATE items SET state=?, message=?, quarantined=COALESCE(?, quarantined), updated=? "
                "WHERE run_id=? AND path=?",
                [(r.state.value, r.message, r.quarantined, now, self.run_id, r.path) for r in results],
            )

    def finish(self, status: str = "done") -> None:
        with _guard(self.path), self.db:
            self.db.execute("UPDATE runs SET status=?, finished=? WHERE run_id=?", (status, time.time(), self.run_id))
