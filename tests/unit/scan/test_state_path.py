"""``--state PATH`` names the state database. A damaged database there is moved aside and
rebuilt, but a folder or a file of another kind is the user's: it is refused (one line, exit 2)
and never moved, even when it is the cache being scanned."""

from __future__ import annotations

import io
import os
import sqlite3
from pathlib import Path

from factories import peers

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Environment(stdout=out, stderr=err, environ={}))
    return code, out.getvalue(), err.getvalue()


def test_a_folder_named_as_state_is_refused_and_kept(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    peers(cache, 2)
    before = sorted(os.listdir(cache))
    code, out, err = cli("scan", str(cache), "--state", str(cache))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"cachedoctor: error: {cache}: is a folder, not a state database")
    assert sorted(os.listdir(cache)) == before and not list(tmp_path.glob("cache.broken-*"))


def test_a_file_of_another_kind_named_as_state_is_refused_and_kept(tmp_path: Path) -> None:
    peers(tmp_path / "cache", 2)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, _, err = cli("scan", str(tmp_path / "cache"), "--state", str(notes))
    assert code == 2 and "is not a SQLite database" in err and err.count("\n") == 1
    assert notes.read_text() == "my notes\n" and not list(tmp_path.glob("notes.txt.broken-*"))


def test_a_damaged_state_database_is_still_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    peers(tmp_path / "cache", 2)
    state = tmp_path / "state.sqlite"
    assert cli("scan", str(tmp_path / "cache"), "--state", str(state))[0] == 0
    data = bytearray(state.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the header stays: a SQLite file, damaged
    state.write_bytes(bytes(data))
    code, out, _ = cli("scan", str(tmp_path / "cache"), "--state", str(state))
    assert code == 0 and "could not be read" in out and list(tmp_path.glob("state.sqlite.broken-*"))
    with sqlite3.connect(state) as db:
        assert db.execute("SELECT COUNT(*) FROM files").fetchone()[0] == 2
