"""A state database per shard (issue 30): shard K of N keeps ``state.shard-K-of-N.sqlite``, so no
two nodes ever write one SQLite file; a rerun split the same way reads only what changed; a scan
split another way (2 -> 3, sharded -> whole) takes the other splits' rows on its first run, and
still reads, and reports, a file changed since their record.

Real files, real SQLite, the real engine. Until the sharded walk reaches ``scan()``, a shard's
scan is emulated by its two parts: its folders are the only ones walked (``exclude`` leaves the
other shards' folders out), and its shard reaches ``StateSet.open`` (:func:`as_shard`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest
from factories import latent, save_pt, settle

from cachedoctor.layouts import LayoutName, LayoutOptions
from cachedoctor.repair.recover import survey
from cachedoctor.scan import ScanOptions, ScanResult, engine, scan
from cachedoctor.scan.state.places import default_path
from cachedoctor.scan.state.plan import StateSet
from cachedoctor.scan.state.sample import Sample
from cachedoctor.statedir import Shard, clock_path, other_splits, shard_of, sharded_path

FOLDERS = [f"f{i}" for i in range(6)]


def cache(tmp_path: Path) -> Path:
    """Six folders of two healthy latents each."""
    root = tmp_path / "cache"
    for i, name in enumerate(FOLDERS):
        for j in range(2):
            save_pt(root / name / f"x{j}.pt", latent(seed=10 * i + j))
    settle(root)
    return root


def owned(shard: Shard) -> list[str]:
    """Shard K of N owns every N-th folder from the K-th (any fixed rule does for the state)."""
    index, count = shard
    return [name for i, name in enumerate(FOLDERS) if i % count == index]


def as_shard(monkeypatch: pytest.MonkeyPatch, shard: Shard | None) -> None:
    """The engine opens its state as shard ``shard`` (what ``--shard`` will pass it)."""

    class Sharded(StateSet):
        @classmethod
        def open(
            cls, roots: list[str], state: str | None, remote: Sequence[str] = (), shard_: Shard | None = None
        ) -> StateSet:
            return StateSet.open(roots, state, remote, shard=shard)

    monkeypatch.setattr(engine, "StateSet", Sharded)


def run(
    monkeypatch: pytest.MonkeyPatch, root: Path, shard: Shard | None = None, deep: bool = False, sample: str = ""
) -> ScanResult:
    as_shard(monkeypatch, shard)
    exclude = () if shard is None else tuple(f for f in FOLDERS if f not in owned(shard))
    options = ScanOptions(
        workers=1, state="auto", exclude=exclude, deep=deep, sample=Sample.parse(sample) if sample else None
    )
    result = scan([str(root)], options)
    assert (result.errors, result.notes) == ([], [])
    return result


def fresh_reads(result: ScanResult) -> int:
    return result.stats.files_seen - result.stats.files_reused


def rows(db: Path) -> dict[tuple[str, str], tuple[int | None, str | None, int]]:
    """``(folder, name) -> (deep_scan, xxh3, scan)`` of every file row in ``db``."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return {
            (os.fsdecode(f), os.fsdecode(n)): (d, x, s)
            for f, n, d, x, s in c.execute("SELECT folder, name, deep_scan, xxh3, scan FROM files")
        }


def folders_of(db: Path) -> set[str]:
    return {folder for folder, _ in rows(db)}


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])
    settle(path.parent.parent)  # its probe file beside the cache, not in it


# --- names ---------------------------------------------------------------------------------


def test_each_state_name_gets_the_shard_before_its_suffix(tmp_path: Path) -> None:
    assert sharded_path("/c/.cachedoctor/state.sqlite", (0, 4)) == "/c/.cachedoctor/state.shard-0-of-4.sqlite"
    assert sharded_path("/x/cache.db", None) == "/x/cache.db"
    assert sharded_path("/x/cache", (2, 3)) == "/x/cache.shard-2-of-3"  # no suffix: at the end
    assert shard_of("/x/cache.shard-2-of-3") == (2, 3) and shard_of("/x/cache.db") is None
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    whole = default_path("s3://bucket/latents", env)
    assert (
        default_path("s3://bucket/latents", env, shard=(1, 2)) == whole.removesuffix(".sqlite") + ".shard-1-of-2.sqlite"
    )
    assert default_path("/c", shard=(1, 2)) == "/c/.cachedoctor/state.shard-1-of-2.sqlite"
    assert clock_path("/c/.cachedoctor/state.shard-1-of-2.sqlite") == "/c/.cachedoctor/state.shard-1-of-2.clock"
    assert clock_path("/c/.cachedoctor/state.sqlite") == "/c/.cachedoctor/state.clock"
    with pytest.raises(ValueError):
        sharded_path("/x/state.sqlite", (2, 2))


def test_other_splits_are_the_whole_one_then_the_other_counts(tmp_path: Path) -> None:
    names = [
        "state.sqlite",
        "state.shard-1-of-3.sqlite",
        "state.shard-0-of-3.sqlite",
        "state.shard-0-of-2.sqlite",
        "state.shard-1-of-2.sqlite",
        "state.shard-10-of-12.sqlite",
        "state.shard-5-of-3.sqlite",  # no such shard
        "state.shard-0-of-2.sqlite-wal",
        "state.shard-0-of-2.sqlite.broken-20260101",
        "other.shard-0-of-2.sqlite",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    whole = str(tmp_path / "state.sqlite")
    found = [os.path.basename(p) for p in other_splits(whole, (1, 2))]
    assert found == [
        "state.sqlite",
        "state.shard-0-of-3.sqlite",
        "state.shard-1-of-3.sqlite",
        "state.shard-10-of-12.sqlite",
    ]
    assert [os.path.basename(p) for p in other_splits(whole, None)] == [
        "state.shard-0-of-2.sqlite",
        "state.shard-1-of-2.sqlite",
        "state.shard-0-of-3.sqlite",
        "state.shard-1-of-3.sqlite",
        "state.shard-10-of-12.sqlite",
    ]


def test_a_named_state_file_is_split_too(tmp_path: Path) -> None:
    root = cache(tmp_path)
    named = tmp_path / "elsewhere" / "cache-state.sqlite"
    states = StateSet.open([str(root)], str(named), shard=(1, 2))
    try:
        assert [s.path for s in states.stores] == [str(tmp_path / "elsewhere" / "cache-state.shard-1-of-2.sqlite")]
    finally:
        states.close()
    assert sorted(os.listdir(named.parent)) == ["cache-state.shard-1-of-2.sqlite", "state.shard-1-of-2.clock"]


def test_a_shard_that_finds_no_cache_file_removes_only_its_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    run(monkeypatch, root, (1, 2))
    for name in FOLDERS:  # the cache is gone; images are left
        for old in (root / name).iterdir():
            old.unlink()
        (root / name / "image.png").write_bytes(b"not a cache file")
    state = root / ".cachedoctor"
    kept = sorted(os.listdir(state))
    run(monkeypatch, root, (0, 2))  # made its database and clock, then removed them: no cache file
    assert sorted(os.listdir(state)) == kept and "state.shard-1-of-2.clock" in kept
    shutil.rmtree(state)
    run(monkeypatch, root, (0, 2))
    assert not state.exists()


# --- one split, run again ------------------------------------------------------------------


def test_two_shards_write_two_files_and_each_keeps_its_own_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    state = root / ".cachedoctor"
    run(monkeypatch, root, (0, 2))
    assert not (state / "state.shard-1-of-2.sqlite").exists() and not (state / "state.sqlite").exists()
    for _ in range(2):  # shard 1 and shard 0 alternate: neither forgets its own folders, nor takes the other's
        for k in (1, 0):
            run(monkeypatch, root, (k, 2))
            for own in (0, 1):
                assert folders_of(state / f"state.shard-{own}-of-2.sqlite") == set(owned((own, 2)))
    assert sorted(n for n in os.listdir(state) if not n.endswith(("-wal", "-shm"))) == [
        "state.shard-0-of-2.clock",
        "state.shard-0-of-2.sqlite",
        "state.shard-1-of-2.clock",
        "state.shard-1-of-2.sqlite",
    ]


def test_a_rerun_split_the_same_way_reads_no_unchanged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = cache(tmp_path)
    for k in (0, 1):
        first = run(monkeypatch, root, (k, 2))
        assert (first.stats.files_seen, first.stats.files_reused) == (6, 0)
    for k in (0, 1):
        again = run(monkeypatch, root, (k, 2))
        assert (again.stats.files_seen, again.stats.files_reused) == (6, 6)


# --- another split -------------------------------------------------------------------------


def test_two_shards_then_three_read_only_the_file_changed_in_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    for k in (0, 1):
        run(monkeypatch, root, (k, 2), deep=True)  # deep: each row carries its deep read and digest
    victim = root / "f2" / "x1.pt"  # shard 0 of 2's, then shard 2 of 3's
    truncate(victim)
    state = root / ".cachedoctor"
    donor = rows(state / "state.shard-0-of-2.sqlite") | rows(state / "state.shard-1-of-2.sqlite")
    results = [run(monkeypatch, root, (k, 3)) for k in range(3)]
    assert [fresh_reads(r) for r in results] == [0, 0, 1]
    assert [(f.kind, f.path) for r in results for f in r.findings] == [("corrupt-archive", str(victim))]
    for k in range(3):  # served rows were copied: each new database holds its own folders
        own = rows(state / f"state.shard-{k}-of-3.sqlite")
        assert {folder for folder, _ in own} == set(owned((k, 3)))
        for (folder, name), (deep_scan, xxh3, _) in own.items():
            if (folder, name) != ("f2", "x1.pt"):  # a deep read of another database: older than any here
                assert (deep_scan, xxh3) == (0, donor[folder, name][1]) and xxh3
    again = [run(monkeypatch, root, (k, 3)) for k in range(3)]
    assert [fresh_reads(r) for r in again] == [0, 0, 0]
    assert [(f.kind, f.path) for r in again for f in r.findings] == [("corrupt-archive", str(victim))]


def test_a_deep_read_another_split_recorded_is_due_before_this_splits_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--sample`` after a re-split: a file never read deep first, then the deep reads the other
    split recorded (taken as older than any of this database), then this split's own."""
    root = cache(tmp_path)
    for k in (0, 1):
        run(monkeypatch, root, (k, 2), deep=True)
    save_pt(root / "f0" / "x2.pt", latent(seed=3))
    settle(root)
    own = root / ".cachedoctor" / "state.shard-0-of-3.sqlite"  # f0 and f3: five files
    first = run(monkeypatch, root, (0, 3), sample="1/5")
    assert first.stats.files_deep == 1 and rows(own)["f0", "x2.pt"][0] == 1  # never read deep: first
    second = run(monkeypatch, root, (0, 3), sample="1/5")
    deep = {key: d for key, (d, _, _) in rows(own).items()}
    assert second.stats.files_deep == 1 and deep["f0", "x2.pt"] == 1  # not again before the others
    assert sorted(deep.values()) == [0, 0, 0, 1, 2]


def test_shards_then_a_whole_scan_then_shards_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = cache(tmp_path)
    for k in (0, 1):
        run(monkeypatch, root, (k, 2))
    victim = root / "f5" / "x0.pt"
    truncate(victim)
    whole = run(monkeypatch, root)
    assert (whole.stats.files_seen, fresh_reads(whole)) == (12, 1)
    assert [(f.kind, f.path) for f in whole.findings] == [("corrupt-archive", str(victim))]
    assert folders_of(root / ".cachedoctor" / "state.sqlite") == set(FOLDERS)
    assert fresh_reads(run(monkeypatch, root)) == 0
    fourths = [run(monkeypatch, root, (k, 4)) for k in range(4)]  # the whole one serves a new split first
    assert [fresh_reads(r) for r in fourths] == [0, 0, 0, 0]
    assert [(f.kind, f.path) for r in fourths for f in r.findings] == [("corrupt-archive", str(victim))]


def damage(db: Path, *rows: tuple[str, str]) -> None:
    """Break the seal of these rows (another first digit of each seal)."""
    with closing(sqlite3.connect(db)) as c, c:
        for folder, name in rows:
            c.execute(
                "UPDATE files SET outcome = (CASE substr(outcome, 1, 1) WHEN '0' THEN '1' ELSE '0' END)"
                " || substr(outcome, 2) WHERE folder = ? AND name = ?",
                (os.fsencode(folder), os.fsencode(name)),
            )


def test_damaged_rows_of_another_split_serve_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole database comes first; where its rows of a folder are all damaged, the next split
    that has sound ones serves it; a damaged row among sound ones is a file read again."""
    root = cache(tmp_path)
    run(monkeypatch, root)
    for k in (0, 1):
        run(monkeypatch, root, (k, 2))
    state = root / ".cachedoctor"
    damage(state / "state.sqlite", ("f0", "x0.pt"), ("f0", "x1.pt"), ("f3", "x0.pt"))
    damage(state / "state.shard-1-of-2.sqlite", ("f3", "x0.pt"))
    first = run(monkeypatch, root, (0, 3))  # f0 (from shard 0 of 2) and f3 (from the whole one)
    assert (first.stats.files_seen, fresh_reads(first)) == (4, 1)
    assert fresh_reads(run(monkeypatch, root, (0, 3))) == 0  # f3/x0.pt: its own row now, the fresh read's


def test_a_garbage_database_of_another_split_is_left_out_without_a_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    for k in (0, 1):
        run(monkeypatch, root, (k, 2))
    garbage = root / ".cachedoctor" / "state.shard-0-of-2.sqlite"
    junk = os.urandom(8192)
    garbage.write_bytes(junk)
    whole = run(monkeypatch, root)  # no error, no note (run asserts both)
    assert (whole.stats.files_seen, fresh_reads(whole)) == (12, 6)  # shard 1's folders served, shard 0's read
    assert [f.path for f in whole.findings] == [] and garbage.read_bytes() == junk  # not ours: left as it is


def test_only_a_database_with_no_finished_scan_reads_other_splits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    for k in (0, 1):
        run(monkeypatch, root, (k, 2))
    killed = StateSet.open([str(root)], "auto", shard=(0, 3))  # begun, then killed before its finish
    killed.stores[0].begin()
    killed.close()
    states = StateSet.open([str(root)], "auto", shard=(0, 3))
    try:
        assert [os.path.basename(d.path) for d in states.stores[0].donors] == [
            "state.shard-0-of-2.sqlite",
            "state.shard-1-of-2.sqlite",
        ]
    finally:
        states.close()
    run(monkeypatch, root, (0, 3))
    states = StateSet.open([str(root)], "auto", shard=(0, 3))
    try:
        assert states.stores[0].donors == []
    finally:
        states.close()


# --- recover -------------------------------------------------------------------------------


def test_recover_of_a_shard_takes_its_own_database_as_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = cache(tmp_path)
    run(monkeypatch, root, (0, 2))
    victim = root / "f4" / "x0.pt"
    truncate(victim)
    as_shard(monkeypatch, (0, 2))
    exclude = tuple(owned((1, 2)))
    found = survey([str(root)], LayoutName.NONE, LayoutOptions(), ScanOptions(workers=1, exclude=exclude), shard=(0, 2))
    assert [(r.since, r.files, [f.path for f in r.damaged]) for r in found.reads] == [
        ("since the last scan (its state database)", 1, [str(victim)])
    ]
