"""The state database heals: whatever happened to it after the scan that wrote it (truncation,
a flipped byte in any page, garbage WAL and shm files, a row that does not decode), every
later scan completes and reports exactly what a scan with ``--no-state`` reports. A damaged
database is moved aside with a note; the repair journal's damage stops repair in one line.

The fuzz runs the scan in-process (the library API; the CLI is checked by the subprocess
tests at the end) on a real database, with a seeded sample of corruption points.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from factories import latent, peers, pt_bytes
from faults_harness import one_line_error

from cachedoctor.scan import ScanOptions, scan

PAGE = 4096


def make_cache(root: Path) -> None:
    """Four folders with findings of several kinds, so the database spans a few pages."""
    for i in range(4):
        folder = root / f"f{i}"
        peers(folder)
        (folder / f"cut{i}.pt").write_bytes(pt_bytes(latent())[: 300 + i])
        (folder / f"tmpStray{i:03d}").write_bytes(b"x" * (10 + i))


def found(root: Path, state: str | None) -> tuple[list[tuple[str, str, str]], list[str]]:
    result = scan([str(root)], ScanOptions(workers=1, state=state))
    assert result.errors == []
    return sorted((f.kind, f.path, f.message) for f in result.findings), result.notes


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, list]:
    """A cache, its state database as two scans left it, and the findings without state."""
    root = tmp_path_factory.mktemp("heal") / "cache"
    make_cache(root)
    expected, _ = found(root, None)
    found(root, "auto")
    found(root, "auto")
    db = root / ".cachedoctor" / "state.sqlite"
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    return root, db.read_bytes(), expected


def corruptions(db: bytes) -> list[tuple[str, dict[str, bytes]]]:
    """A seeded sample: truncations, one flipped byte in every page (past the 100-byte file
    header on page 1, whose damage the opening already handles), garbage WAL and shm files."""
    rng = random.Random(12)
    pages = len(db) // PAGE
    out: list[tuple[str, dict[str, bytes]]] = []
    for cut in (0, 50, 100, PAGE, len(db) // 2, len(db) - 1):
        out.append((f"truncated to {cut}", {"": db[:cut]}))
    for page in range(pages):
        for _ in range(3):
            at = page * PAGE + rng.randrange(100 if page == 0 else 0, PAGE)
            flipped = bytearray(db)
            flipped[at] ^= 1 << rng.randrange(8)
            out.append((f"bit flipped at {at} (page {page + 1})", {"": bytes(flipped)}))
    wal_header = bytes.fromhex("377f0682002de218") + os.urandom(24)
    out.append(("garbage WAL", {"": db, "-wal": os.urandom(5000)}))
    out.append(("WAL with a valid magic and garbage frames", {"": db, "-wal": wal_header + os.urandom(PAGE * 2)}))
    out.append(("garbage shm", {"": db, "-shm": os.urandom(32768)}))
    out.append(("garbage WAL and shm", {"": db, "-wal": os.urandom(9000), "-shm": os.urandom(32768)}))
    return out


def test_every_corruption_heals(written: tuple[Path, bytes, list]) -> None:
    """Each corruption, then two scans with state: both report the ``--no-state`` findings
    with no error. (Not asserted: that the database then passes ``PRAGMA integrity_check``.
    A flip in a part of a page no query reads stays until a query reaches it, and is healed
    then; checking the whole file on every scan would cost what the state saves.)"""
    root, pristine, expected = written
    db = root / ".cachedoctor" / "state.sqlite"
    cases = corruptions(pristine)
    assert len(cases) >= 20
    problems = []
    for label, files in cases:
        for leftover in db.parent.glob("state.sqlite*"):
            leftover.unlink()
        for suffix, data in files.items():
            Path(f"{db}{suffix}").write_bytes(data)
        for attempt in ("first", "second"):
            findings, _notes = found(root, "auto")
            if findings != expected:
                problems.append(
                    f"{label}: the {attempt} scan reports {len(findings)} findings, not the {len(expected)} expected"
                )
    assert problems == [], "\n".join(problems)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CACHEDOCTOR_PROGRESS": "none"}  # stderr is judged line by line here
    return subprocess.run(
        [sys.executable, "-m", "cachedoctor", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize("damage", ["undecodable result", "damaged b-tree page"])
def test_damage_after_opening_is_a_note_and_the_report(tmp_path: Path, damage: str) -> None:
    """The issue's two cases through the CLI: invalid UTF-8 in ``folders.result`` (SQLite fails
    to decode it) and a damaged b-tree page (malformed). The scan prints its report (exit 1,
    the findings), a note that names where the database went, and the next scan is clean of it."""
    root = tmp_path / "cache"
    make_cache(root)
    assert cli("scan", str(root)).returncode == 1
    path = root / ".cachedoctor" / "state.sqlite"
    db = sqlite3.connect(path)
    if damage == "undecodable result":
        db.execute("UPDATE folders SET result = CAST(X'80ff' || CAST(result AS BLOB) AS TEXT)")
        db.commit()
        db.close()
    else:
        (root_page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'files'").fetchone()
        db.close()
        data = bytearray(path.read_bytes())
        at = (root_page - 1) * PAGE
        data[at : at + 1] = b"\x99"  # not a b-tree page type
        path.write_bytes(bytes(data))
    expected = cli("scan", str(root), "--no-state")
    proc = cli("scan", str(root))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.replace("\n", " ").count("moved it to") == 1, proc.stdout
    assert [n for n in os.listdir(path.parent) if n.startswith("state.sqlite.broken-")], os.listdir(path.parent)

    def paths(out: str) -> list[str]:  # the report's lines about cache files: the findings
        return sorted(line for line in out.splitlines() if f"{root}/f" in line and "state database" not in line)

    assert paths(proc.stdout) == paths(expected.stdout) and len(paths(expected.stdout)) >= 8, proc.stdout
    again = cli("scan", str(root))
    assert again.returncode == 1 and "moved it to" not in again.stdout and "Traceback" not in again.stderr


def test_an_unreadable_journal_stops_repair_in_one_line_and_fresh_moves_it_aside(tmp_path: Path) -> None:
    """A repair journal that is not a database may hold an interrupted run: repair stops, one
    line naming the journal and ``--fresh``; ``--fresh`` moves it aside and repairs."""
    root = tmp_path / "cache"
    make_cache(root)
    journal = root / ".cachedoctor" / "journal.sqlite"
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b"\x00not a database" * 300)
    stopped = cli("repair", str(root), "--keep-blocked", "--yes")
    line = one_line_error(stopped.stderr)
    assert stopped.returncode == 2 and line is not None, stopped.stderr
    assert line.startswith(f"{journal}: cannot read the repair journal") and "--fresh" in line, line
    fresh = cli("repair", str(root), "--keep-blocked", "--yes", "--fresh")
    assert fresh.returncode == 1 and "done:" in fresh.stdout, fresh.stdout + fresh.stderr
    assert "moved it to" in fresh.stdout
    assert [n for n in os.listdir(journal.parent) if n.startswith("journal.sqlite.broken-")]


def test_a_journal_with_no_unfinished_run_heals_by_itself(tmp_path: Path) -> None:
    """A journal whose only damage leaves its runs readable, none unfinished, holds nothing
    to resume: repair moves it aside with a note and goes on (no --fresh needed)."""
    root = tmp_path / "cache"
    make_cache(root)
    assert cli("repair", str(root), "--keep-blocked", "--yes").returncode == 1
    journal = root / ".cachedoctor" / "journal.sqlite"
    db = sqlite3.connect(journal)
    db.execute("PRAGMA writable_schema = ON")  # break only the items table's definition
    db.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE items (' WHERE name = 'items'")
    db.commit()
    db.close()
    for leftover in journal.parent.glob("journal.sqlite-*"):
        leftover.unlink()
    again = cli("repair", str(root), "--keep-blocked", "--yes")
    assert "Traceback" not in again.stderr, again.stderr
    if again.returncode == 2:  # SQLite refused the whole file: then the one line and --fresh
        line = one_line_error(again.stderr)
        assert line is not None and "--fresh" in line, again.stderr
    else:
        assert again.returncode == 1 and "moved it to" in again.stdout, again.stdout
