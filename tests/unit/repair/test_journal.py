"""The repair journal on real SQLite: a run's life, and finding (then resuming) one whose process died."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

from cachedoctor.repair.journal import Journal, finish_run, interrupted_run
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, Stat
from cachedoctor.statedir import journal_path


def action(root: Path, name: str, kind: ActionKind = ActionKind.REWRITE_CPU) -> Action:
    return Action(kind, str(root / name), str(root), ("device-tagged",), None, Stat(10, 20, 30))


def rows(root: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(journal_path(str(root)))
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_start_plan_record_finish_leave_the_run_and_its_items(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path))
    journal.start("run-1", ["repair", "x"], None, None, False)
    journal.plan([action(tmp_path, "a.pt"), action(tmp_path, "b.pt")])
    journal.record(ItemResult(str(tmp_path / "a.pt"), ActionKind.REWRITE_CPU, ItemState.VERIFIED, "ok", "/q/a.pt"))
    assert journal.interrupted() is None  # running, but its process (this one) is alive
    journal.finish("done")
    journal.close()
    assert rows(tmp_path, "SELECT run_id, status FROM runs") == [("run-1", "done")]
    assert rows(tmp_path, "SELECT path, state, quarantined FROM items ORDER BY path") == [
        (str(tmp_path / "a.pt"), "verified", "/q/a.pt"),
        (str(tmp_path / "b.pt"), "planned", None),
    ]
    assert interrupted_run(str(tmp_path)) is None


def test_planning_twice_keeps_an_items_recorded_state(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path))
    journal.start("run-1", [], None, None, False)
    journal.plan([action(tmp_path, "a.pt")])
    journal.record(ItemResult(str(tmp_path / "a.pt"), ActionKind.REWRITE_CPU, ItemState.VERIFIED))
    journal.plan([action(tmp_path, "a.pt")])
    journal.close()
    assert rows(tmp_path, "SELECT state FROM items") == [("verified",)]


def test_no_journal_means_no_interrupted_run_and_nothing_created(tmp_path: Path) -> None:
    assert interrupted_run(str(tmp_path)) is None
    assert not (tmp_path / ".cachedoctor").exists()


def test_a_run_whose_process_died_is_interrupted_and_resumes_under_its_id(tmp_path: Path) -> None:
    planned = [action(tmp_path, "a.pt"), action(tmp_path, "b.pt", ActionKind.QUARANTINE)]
    script = (
        "import sys; from cachedoctor.repair.journal import Journal; "
        "from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState; "
        "j = Journal(sys.argv[1]); j.start('run-dead', ['repair'], '[\"pool:x\"]', 'fp1', False); "
        "j.plan([Action.from_json(t) for t in sys.argv[2:]]); "
        "j.record(ItemResult(Action.from_json(sys.argv[2]).path, ActionKind.REWRITE_CPU, ItemState.VERIFIED)); "
        "j.close()"  # exits without finish(): as a killed repair leaves it
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path), *(a.to_json() for a in planned)], check=True)
    found = interrupted_run(str(tmp_path))
    assert found is not None
    assert (found.run_id, found.encoders, found.fingerprint) == ("run-dead", ("pool:x",), "fp1")
    assert found.verified == frozenset({str(tmp_path / "a.pt")})
    assert found.unfinished == (planned[1],)
    journal = Journal(str(tmp_path))
    journal.start("run-dead", ["repair"], None, "fp1", True)  # this process takes the run over
    assert journal.interrupted() is None
    journal.record(ItemResult(str(tmp_path / "b.pt"), ActionKind.QUARANTINE, ItemState.VERIFIED))
    journal.finish("done")
    journal.close()
    assert interrupted_run(str(tmp_path)) is None
    assert rows(tmp_path, "SELECT status FROM runs") == [("done",)]


def test_finish_run_closes_a_run_and_is_a_no_op_without_journal(tmp_path: Path) -> None:
    finish_run(str(tmp_path), None, "nothing", "done")
    assert not (tmp_path / ".cachedoctor").exists()
    journal = Journal(str(tmp_path), rank=3)
    journal.start("run-r", [], None, None, False)
    journal.close()
    finish_run(str(tmp_path), 3, "run-r", "abandoned")
    db = sqlite3.connect(journal_path(str(tmp_path), 3))
    assert db.execute("SELECT status FROM runs").fetchall() == [("abandoned",)]
    db.close()
    assert journal_path(str(tmp_path), 3).endswith("/.cachedoctor/journal-rank3.sqlite")


def test_a_journal_from_before_scopes_opens_and_its_run_resumes_with_crash_kinds_only(tmp_path: Path) -> None:
    from cachedoctor.repair.recover import CRASH_KINDS, resumed_only

    path = Path(journal_path(str(tmp_path)))
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(  # the runs table as it was before the scope column
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, started REAL NOT NULL, finished REAL, status TEXT NOT NULL,"
        " host TEXT NOT NULL, pid INTEGER NOT NULL, pid_start TEXT, argv TEXT, encoder TEXT, fingerprint TEXT);"
    )
    db.execute(  # a run of this host whose process is gone
        "INSERT INTO runs VALUES ('run-old', 1.0, NULL, 'interrupted', ?, 2147483646, NULL, '[]', NULL, NULL)",
        (socket.gethostname(),),
    )
    db.commit()
    db.close()
    found = interrupted_run(str(tmp_path))
    assert found is not None and found.scope is None
    assert resumed_only(found) == CRASH_KINDS


def test_a_run_records_its_scope_and_a_resume_reads_it_back(tmp_path: Path) -> None:
    from cachedoctor.repair.recover import resumed_only
    from cachedoctor.repair.scope import run_scope

    journal = Journal(str(tmp_path))
    journal.start("run-1", ["repair"], None, None, False, run_scope(frozenset({"device-tagged"}), True))
    journal.close()
    db = sqlite3.connect(journal_path(str(tmp_path)))
    db.execute("UPDATE runs SET pid = 2147483646")  # its process is gone
    db.commit()
    db.close()
    found = interrupted_run(str(tmp_path))
    assert found is not None
    assert (found.only, found.keep_blocked) == (frozenset({"device-tagged"}), True)
    assert resumed_only(found) == frozenset({"device-tagged"})
