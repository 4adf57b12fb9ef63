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


def test_a_device_or_fifo_named_as_state_is_refused_and_never_moved(tmp_path: Path) -> None:
    """``--state /dev/null`` (meant as "no state") once renamed the device aside and put a SQLite
    file in its place. A device node and a FIFO made here stand in for it."""
    import stat

    peers(tmp_path / "cache", 2)
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in (device, fifo):
        code, out, err = cli("scan", str(tmp_path / "cache"), "--state", str(path))
        assert code == 2 and out == "" and err.count("\n") == 1
        assert err.startswith(f"cachedoctor: error: {path}: is not a regular file")
    assert stat.S_ISCHR(os.lstat(device).st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "null", "pipe"]


def test_move_aside_never_moves_what_is_not_a_regular_file(tmp_path: Path) -> None:
    import pytest

    from cachedoctor.errors import PathError
    from cachedoctor.faults import move_aside

    fifo = tmp_path / "state.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(PathError):
        move_aside(str(fifo))
    assert os.path.exists(fifo) and not list(tmp_path.glob("*.broken-*"))
