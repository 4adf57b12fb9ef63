"""A state database per shard (issue 30): shard K of N keeps ``state.shard-K-of-N.sqlite``, so no
two nodes ever write one SQLite file; a rerun split the same way reads only what changed; a scan
split another way (2 -> 3, sharded -> whole) takes the other splits' rows on its first run, and
still reads, and reports, a file changed since their record.

Real files, real SQLite, the real engine with ``ScanOptions.shard`` (``--shard K/N``). Shards own
folders by a hash of their path, so which shard owns which folder depends on ``tmp_path``: the
cache is grown until every shard of 2, 3 and 4 owns a folder, and each test asks who owns what.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

from factories import latent, save_pt, settle

from cachedoctor.layouts import LayoutName, LayoutOptions
from cachedoctor.repair.recover import survey
from cachedoctor.scan import ScanOptions, ScanResult, scan
from cachedoctor.scan.state.places import default_path
from cachedoctor.scan.state.plan import StateSet
from cachedoctor.scan.state.sample import Sample
from cachedoctor.sharding.interface import Shard
from cachedoctor.statedir import clock_path, other_splits, sharded_path


def cache(tmp_path: Path) -> Path:
    """Folders ``f0``, ``f1``, ... of two healthy latents each, as many as it takes for every
    shard of 2, 3 and 4 to own one."""
    root = tmp_path / "cache"
    i = 0
    while i < 4 or not all(owned(root, Shard(k, n)) for n in (2, 3, 4) for k in range(n)):
        for j in range(2):
            save_pt(root / f"f{i}" / f"x{j}.pt", latent(seed=10 * i + j))
        i += 1
        assert i < 64
    settle(root)
    return root


def folders(root: Path) -> list[str]:
    return sorted((p.name for p in root.iterdir() if p.name.startswith("f")), key=lambda n: int(n[1:]))


def owned(root: Path, shard: Shard) -> list[str]:
    return [name for name in folders(root) if shard.owns(str(root / name))] if root.exists() else []


def owner(root: Path, folder: str, count: int) -> Shard:
    return next(Shard(k, count) for k in range(count) if Shard(k, count).owns(str(root / folder)))


def db(root: Path, shard: Shard | None = None) -> Path:
    return Path(default_path(str(root), shard=shard))


def run(root: Path, shard: Shard | None = None, deep: bool = False, sample: str = "") -> ScanResult:
    options = ScanOptions(
        workers=1, state="auto", shard=shard, deep=deep, sample=Sample.parse(sample) if sample else None
    )
    result = scan([str(root)], options)
    assert (result.errors, result.notes) == ([], [])
    return result


def split(root: Path, count: int, deep: bool = False) -> list[ScanResult]:
    """Every shard of ``count``, one after the other (as a job array's tasks may run)."""
    return [run(root, Shard(k, count), deep) for k in range(count)]


def fresh_reads(result: ScanResult) -> int:
    return result.stats.files_seen - result.stats.files_reused


def found(results: list[ScanResult]) -> list[tuple[str, str]]:
    return [(f.kind, f.path) for r in results for f in r.findings]


def rows(path: Path) -> dict[tuple[str, str], tuple[int | None, str | None]]:
    """``(folder, name) -> (deep_scan, xxh3)`` of every file row in the database at ``path``."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return {
            (os.fsdecode(f), os.fsdecode(n)): (d, x)
            for f, n, d, x in c.execute("SELECT folder, name, deep_scan, xxh3 FROM files")
        }


def folders_of(path: Path) -> set[str]:
    return {folder for folder, _ in rows(path)}


def truncate(root: Path, victim: Path) -> None:
    victim.write_bytes(victim.read_bytes()[:100])
    settle(root)


def damage(path: Path, *names: tuple[str, str]) -> None:
    """Break the seal of these rows (another first digit of each seal)."""
    with closing(sqlite3.connect(path)) as c, c:
        for folder, name in names:
            c.execute(
                "UPDATE files SET outcome = (CASE substr(outcome, 1, 1) WHEN '0' THEN '1' ELSE '0' END)"
                " || substr(outcome, 2) WHERE folder = ? AND name = ?",
                (os.fsencode(folder), os.fsencode(name)),
            )


# --- names ---------------------------------------------------------------------------------


def test_each_state_name_gets_the_shard_before_its_suffix(tmp_path: Path) -> None:
    assert sharded_path("/c/.cachedoctor/state.sqlite", Shard(0, 4)) == "/c/.cachedoctor/state.shard-0-of-4.sqlite"
    assert sharded_path("/x/cache.db", None) == sharded_path("/x/cache.db", Shard(0, 1)) == "/x/cache.db"
    assert sharded_path("/x/cache", Shard(2, 3)) == "/x/cache.shard-2-of-3"  # no suffix: at the end
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    whole = default_path("s3://bucket/latents", env)
    sharded = default_path("s3://bucket/latents", env, shard=Shard(1, 2))
    assert sharded == whole.removesuffix(".sqlite") + ".shard-1-of-2.sqlite"
    assert default_path("/c", shard=Shard(1, 2)) == "/c/.cachedoctor/state.shard-1-of-2.sqlite"
    assert clock_path("/c/.cachedoctor/state.shard-1-of-2.sqlite") == "/c/.cachedoctor/state.shard-1-of-2.clock"
    assert clock_path("/c/.cachedoctor/state.sqlite") == "/c/.cachedoctor/state.clock"


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
    assert [os.path.basename(p) for p in other_splits(whole, Shard(1, 2))] == [
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
    states = StateSet.open([str(root)], str(named), shard=Shard(1, 2))
    try:
        assert [s.path for s in states.stores] == [str(tmp_path / "elsewhere" / "cache-state.shard-1-of-2.sqlite")]
    finally:
        states.close()
    assert sorted(os.listdir(named.parent)) == ["cache-state.shard-1-of-2.sqlite", "state.shard-1-of-2.clock"]


def test_a_shard_that_finds_no_cache_file_removes_only_its_own_files(tmp_path: Path) -> None:
    root = cache(tmp_path)
    run(root, Shard(1, 2))
    for name in folders(root):  # the cache is gone; images are left
        for old in (root / name).iterdir():
            old.unlink()
        (root / name / "image.png").write_bytes(b"not a cache file")
    state = root / ".cachedoctor"
    kept = sorted(os.listdir(state))
    run(root, Shard(0, 2))  # made its database and clock, then removed them: no cache file
    assert sorted(os.listdir(state)) == kept and "state.shard-1-of-2.clock" in kept
    shutil.rmtree(state)
    run(root, Shard(0, 2))
    assert not state.exists()


# --- one split, run again ------------------------------------------------------------------


def test_two_shards_write_two_files_and_each_keeps_its_own_folders(tmp_path: Path) -> None:
    root = cache(tmp_path)
    state = root / ".cachedoctor"
    run(root, Shard(0, 2))
    assert not db(root, Shard(1, 2)).exists() and not db(root).exists()
    for _ in range(2):  # shard 1 and shard 0 alternate: neither forgets its own folders, nor takes the other's
        for k in (1, 0):
            run(root, Shard(k, 2))
            for own in (Shard(0, 2), Shard(1, 2)):
                assert folders_of(db(root, own)) == set(owned(root, own))
    assert sorted(n for n in os.listdir(state) if not n.endswith(("-wal", "-shm"))) == [
        "state.shard-0-of-2.clock",
        "state.shard-0-of-2.sqlite",
        "state.shard-1-of-2.clock",
        "state.shard-1-of-2.sqlite",
    ]


def test_a_rerun_split_the_same_way_reads_no_unchanged_file(tmp_path: Path) -> None:
    root = cache(tmp_path)
    first = split(root, 2)
    assert [(r.stats.files_seen, r.stats.files_reused) for r in first] == [
        (2 * len(owned(root, Shard(k, 2))), 0) for k in range(2)
    ]
    again = split(root, 2)
    assert [(r.stats.files_seen, r.stats.files_reused) for r in again] == [
        (r.stats.files_seen, r.stats.files_seen) for r in first
    ]


# --- another split -------------------------------------------------------------------------


def test_two_shards_then_three_read_only_the_file_changed_in_between(tmp_path: Path) -> None:
    root = cache(tmp_path)
    split(root, 2, deep=True)  # deep: each row carries its deep read and digest
    victim = root / "f1" / "x1.pt"
    truncate(root, victim)
    donor = rows(db(root, Shard(0, 2))) | rows(db(root, Shard(1, 2)))
    thirds = split(root, 3)
    assert [fresh_reads(r) for r in thirds] == [int(k == owner(root, "f1", 3).index) for k in range(3)]
    assert found(thirds) == [("corrupt-archive", str(victim))]
    for k in range(3):  # served rows were copied: each new database holds its own folders
        own = rows(db(root, Shard(k, 3)))
        assert {folder for folder, _ in own} == set(owned(root, Shard(k, 3)))
        for (folder, name), (deep_scan, xxh3) in own.items():
            if (folder, name) != ("f1", "x1.pt"):  # a deep read of another database: older than any here
                assert (deep_scan, xxh3) == (0, donor[folder, name][1]) and xxh3
    again = split(root, 3)
    assert [fresh_reads(r) for r in again] == [0, 0, 0]
    assert found(again) == [("corrupt-archive", str(victim))]


def test_a_deep_read_another_split_recorded_is_due_before_this_splits_own(tmp_path: Path) -> None:
    """``--sample`` (a whole scan's: a split one is refused) after sharded deep reads: a file never
    read deep first, then the deep reads the shards recorded (taken as older than any of this
    database), then this database's own."""
    root = cache(tmp_path)
    split(root, 2, deep=True)
    save_pt(root / "f0" / "x2.pt", latent(seed=3))
    settle(root)
    files = 2 * len(folders(root)) + 1
    first = run(root, sample=f"1/{files}")  # one file read deep a run
    assert first.stats.files_deep == 1 and rows(db(root))["f0", "x2.pt"][0] == 1  # never read deep: first
    second = run(root, sample=f"1/{files}")
    deep = {key: d for key, (d, _) in rows(db(root)).items()}
    assert second.stats.files_deep == 1 and deep["f0", "x2.pt"] == 1  # not again before the others
    assert sorted(deep.values()) == [0] * (files - 2) + [1, 2]


def test_shards_then_a_whole_scan_then_shards_again(tmp_path: Path) -> None:
    root = cache(tmp_path)
    split(root, 2)
    victim = root / "f2" / "x0.pt"
    truncate(root, victim)
    whole = run(root)
    assert (whole.stats.files_seen, fresh_reads(whole)) == (2 * len(folders(root)), 1)
    assert found([whole]) == [("corrupt-archive", str(victim))]
    assert folders_of(db(root)) == set(folders(root))
    assert fresh_reads(run(root)) == 0
    fourths = split(root, 4)  # the whole one serves a new split first
    assert [fresh_reads(r) for r in fourths] == [0, 0, 0, 0]
    assert found(fourths) == [("corrupt-archive", str(victim))]


def test_damaged_rows_of_another_split_serve_nothing(tmp_path: Path) -> None:
    """The whole database comes first; where its rows of a folder are all damaged, the next split
    that has sound ones serves it; a damaged row among sound ones is a file read again."""
    root = cache(tmp_path)
    run(root)
    split(root, 2)
    damage(db(root), ("f0", "x0.pt"), ("f0", "x1.pt"), ("f1", "x0.pt"))
    damage(db(root, owner(root, "f1", 2)), ("f1", "x0.pt"))
    thirds = split(root, 3)  # f0 from its shard of 2, f1 from the whole one
    assert sum(fresh_reads(r) for r in thirds) == 1
    assert [fresh_reads(r) for r in split(root, 3)] == [0, 0, 0]  # f1/x0.pt: its own row now, the fresh read's


def test_a_garbage_database_of_another_split_is_left_out_without_a_word(tmp_path: Path) -> None:
    root = cache(tmp_path)
    split(root, 2)
    garbage = db(root, Shard(0, 2))
    junk = os.urandom(8192)
    garbage.write_bytes(junk)
    whole = run(root)  # no error, no note (run asserts both)
    assert (whole.stats.files_seen, fresh_reads(whole)) == (2 * len(folders(root)), 2 * len(owned(root, Shard(0, 2))))
    assert whole.findings == [] and garbage.read_bytes() == junk  # not ours: left as it is


def test_only_a_database_with_no_finished_scan_reads_other_splits(tmp_path: Path) -> None:
    root = cache(tmp_path)
    split(root, 2)
    killed = StateSet.open([str(root)], "auto", shard=Shard(0, 3))  # begun, then killed before its finish
    killed.stores[0].begin()
    killed.close()
    states = StateSet.open([str(root)], "auto", shard=Shard(0, 3))
    try:
        assert [os.path.basename(d.path) for d in states.stores[0].donors] == [
            "state.shard-0-of-2.sqlite",
            "state.shard-1-of-2.sqlite",
        ]
    finally:
        states.close()
    run(root, Shard(0, 3))
    states = StateSet.open([str(root)], "auto", shard=Shard(0, 3))
    try:
        assert states.stores[0].donors == []
    finally:
        states.close()


def test_repair_s_existing_state_and_a_dry_run_s_start_warm_from_another_split(tmp_path: Path) -> None:
    """A repair split over ranks after a plain scan: ``existing`` state makes each shard's
    database and fills it from the whole one; a dry run reads the whole one and writes nothing."""
    root = cache(tmp_path)
    run(root)
    state = root / ".cachedoctor"
    before = sorted(os.listdir(state))
    for k in range(2):
        dry = scan([str(root)], ScanOptions(workers=1, state="read-only", shard=Shard(k, 2)))
        assert (dry.stats.files_seen, fresh_reads(dry)) == (2 * len(owned(root, Shard(k, 2))), 0)
    assert sorted(os.listdir(state)) == before
    for k in range(2):
        existing = scan([str(root)], ScanOptions(workers=1, state="existing", shard=Shard(k, 2)))
        assert fresh_reads(existing) == 0 and folders_of(db(root, Shard(k, 2))) == set(owned(root, Shard(k, 2)))
    bare = tmp_path / "bare"  # no database of any split: existing state makes none
    save_pt(bare / "f0" / "x0.pt", latent())
    scan([str(bare)], ScanOptions(workers=1, state="existing", shard=owner(bare, "f0", 2)))
    assert not (bare / ".cachedoctor").exists()


# --- recover -------------------------------------------------------------------------------


def test_recover_of_a_shard_takes_its_own_database_as_the_checkpoint(tmp_path: Path) -> None:
    root = cache(tmp_path)
    shard = owner(root, "f0", 2)
    run(root, shard)
    victim = root / "f0" / "x0.pt"
    truncate(root, victim)
    survey_found = survey([str(root)], LayoutName.NONE, LayoutOptions(), ScanOptions(workers=1, shard=shard))
    assert [(r.since, r.files, [f.path for f in r.damaged]) for r in survey_found.reads] == [
        ("since the last scan (its state database)", 1, [str(victim)])
    ]
