"""Several processes opening one new SQLite database at the same moment (two repairs, or two
scans, started together on a fresh cache). SQLite refuses the journal-mode switch at once, without
waiting on the busy timeout, when two connections race for it; each opener must wait its turn
instead of failing with "database is locked"."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cachedoctor.repair.journal import Journal, new_run_id
from cachedoctor.scan.state import db as statedb

ROUNDS = 15
OPENERS = 4


def _open_journal(root: str) -> None:
    journal = Journal(root)
    try:
        journal.interrupted()
        journal.start(new_run_id(), ["repair"], None, None, False)
        journal.finish("done")
    finally:
        journal.close()


def _open_state(root: str) -> None:
    db, note = statedb.connect(os.path.join(root, "state.sqlite"), lambda: "producer-1")
    db.close()
    assert note is None


def _opener(target: Callable[[str], None], root: str, barrier: object, errors: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        target(root)
    except BaseException as exc:  # reported to the parent, which fails the test
        errors.put(f"{type(exc).__name__}: {exc}")  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", [_open_journal, _open_state], ids=["journal", "state"])
def test_openers_racing_on_a_new_database_all_succeed(tmp_path: Path, target: Callable[[str], None]) -> None:
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    for attempt in range(ROUNDS):
        root = tmp_path / f"round{attempt}"
        root.mkdir()
        barrier = ctx.Barrier(OPENERS)
        procs = [ctx.Process(target=_opener, args=(target, str(root), barrier, errors)) for _ in range(OPENERS)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        assert [proc.exitcode for proc in procs] == [0] * OPENERS
    seen = []
    while not errors.empty():
        seen.append(errors.get())
    assert seen == []
