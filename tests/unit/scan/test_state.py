"""The incremental state database: a rescan reads only what changed, and still finds each
defect planted after the last scan; sampled deep reads rotate; concurrent scans stay sound."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import flip_data_byte, latent, peers, save_pt, settle

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.state.sample import Sample


def cli(*argv: str, cwd: str = "/") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd=cwd)
    return run(list(argv), env), out.getvalue(), err.getvalue()


def report(*argv: str) -> tuple[int, dict]:
    code, out, err = cli("scan", "--format", "json", *argv)
    assert code != 2, err
    return code, json.loads(out)


def cache(tmp_path: Path, n: int = 6) -> Path:
    folder = tmp_path / "cache"
    peers(folder, n)
    save_pt(folder / "sub" / "a.pt", latent(seed=10))
    save_pt(folder / "sub" / "b.pt", latent(seed=11))
    settle(folder)
    return folder


def test_rescan_reads_nothing_when_nothing_changed(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    first = scan([str(folder)], ScanOptions(workers=1, state="auto"))
    again = scan([str(folder)], ScanOptions(workers=1, state="auto"))
    assert (first.stats.files_seen, first.stats.files_reused) == (8, 0)
    assert (again.stats.files_seen, again.stats.files_read, again.stats.files_reused) == (8, 8, 8)
    assert again.stats.formats == first.stats.formats and again.stats.bytes_read == first.stats.bytes_read
    assert (folder / ".cachedoctor" / "state.sqlite").is_file()
    code, out, _ = cli("scan", str(folder))
    assert code == 0 and "(8 unchanged since the last scan, 0 read)" in out


def test_the_rescan_header_adds_up_with_skipped_files(tmp_path: Path) -> None:
    """Skipped (foreign) files are reused from the state too, but they are no cache files: the
    header counts the cache files, "N files (U unchanged, R read)" with N = U + R, and the
    foreign ones apart ("1 skipped"), as the first scan does (issue 15: "0 files in 1 folder
    (3 unchanged since the last scan, 0 read)" for a folder of images)."""
    folder = cache(tmp_path)
    (folder / "notes.txt").write_text("not a cache file\n")
    code, out, _ = cli("scan", str(folder))
    assert code == 0 and "8 files read in 2 folders" in out and "1 skipped" in out
    code, out, _ = cli("scan", str(folder))
    assert code == 0 and "8 files in 2 folders (8 unchanged since the last scan, 0 read)" in out
    assert "1 skipped" in out
    save_pt(folder / "sub" / "a.pt", latent(seed=12))
    settle(folder)
    code, out, _ = cli("scan", str(folder))
    assert code == 0 and "8 files in 2 folders (7 unchanged since the last scan, 1 read)" in out
    assert "1 skipped" in out


def test_a_file_truncated_after_the_scan_is_read_again_and_reported(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    assert report(str(folder))[1]["findings"] == []
    victim = folder / "peer2.pt"
    victim.write_bytes(victim.read_bytes()[:100])
    code, doc = report(str(folder))
    assert code == 1 and doc["summary"]["files_reused"] == 7
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [("corrupt-archive", str(victim))]


def test_same_size_same_mtime_rewrite_is_caught_by_ctime(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    victim = folder / "sub" / "a.pt"
    assert report(str(folder))[1]["findings"] == []
    before = victim.stat()
    raw = bytearray(victim.read_bytes())
    end = raw.rindex(b"PK\x05\x06")
    raw[end : end + 4] = b"\0\0\0\0"  # the zip's end record, gone
    with open(victim, "r+b") as f:  # in place: same inode, same size
        f.write(raw)
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the mtime put back
    assert (victim.stat().st_ino, victim.stat().st_size, victim.stat().st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    code, doc = report(str(folder))
    assert doc["summary"]["files_reused"] == 7
    assert [(f["kind"], f["path"], f["details"]["problem"]) for f in doc["findings"]] == [
        ("corrupt-archive", str(victim), "truncated")
    ]


def test_racy_file_is_read_again_by_the_next_scan(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    future = folder / "peer0.pt"
    os.utime(future, ns=(time.time_ns() + 3600 * 10**9,) * 2)  # not older than the scan's clock tick
    scan([str(folder)], ScanOptions(workers=1, state="auto"))
    again = scan([str(folder)], ScanOptions(workers=1, state="auto"))
    assert again.stats.files_reused == 7
    rows = (
        sqlite3.connect(folder / ".cachedoctor" / "state.sqlite")
        .execute("SELECT name FROM files WHERE racy = 1")
        .fetchall()
    )
    assert rows == [(b"peer0.pt",)]


def test_deep_findings_are_kept_for_unchanged_files(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    victim = folder / "peer1.pt"
    flip_data_byte(victim)
    settle(folder)
    assert report(str(folder))[1]["findings"] == []  # a quick scan cannot see a bad CRC
    report("--deep", str(folder))
    code, doc = report(str(folder))  # quick again: the file is unchanged, so its deep finding stands
    assert code == 1 and doc["summary"]["files_reused"] == 8
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [("corrupt-archive", str(victim))]


def test_moved_cache_reports_its_files_where_they_are_now(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    save_pt(folder / "cuda.pt", latent(seed=3).to(torch_float()))  # float32 among bf16 peers
    settle(folder)
    report(str(folder))
    moved = tmp_path / "moved"
    folder.rename(moved)  # same inodes and times: every row still matches
    code, doc = report(str(moved))
    assert doc["summary"]["files_reused"] == 9
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [("dtype-mismatch", str(moved / "cuda.pt"))]


def torch_float():  # type: ignore[no-untyped-def]
    import torch

    return torch.float32


def test_deleted_files_and_folders_leave_the_database(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    report(str(folder))
    (folder / "peer5.pt").unlink()
    for p in (folder / "sub").iterdir():
        p.unlink()
    (folder / "sub").rmdir()
    report(str(folder))
    db = sqlite3.connect(folder / ".cachedoctor" / "state.sqlite")
    names = sorted(n for (n,) in db.execute("SELECT name FROM files"))
    assert names == [b"peer0.pt", b"peer1.pt", b"peer2.pt", b"peer3.pt", b"peer4.pt"]
    assert db.execute("SELECT folder FROM folders").fetchall() == [(b".",)]


def test_no_state_reads_everything_and_writes_nothing(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    code, doc = report("--no-state", str(folder))
    code2, doc2 = report("--no-state", str(folder))
    assert (doc["summary"]["files_reused"], doc2["summary"]["files_reused"]) == (0, 0)
    assert not (folder / ".cachedoctor").exists()


def test_state_path_elsewhere(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    db = tmp_path / "elsewhere" / "cache-state.sqlite"
    report("--state", str(db), str(folder))
    code, doc = report("--state", str(db), str(folder))
    assert doc["summary"]["files_reused"] == 8 and db.is_file()
    assert not (folder / ".cachedoctor").exists()


def test_unusable_state_path_is_one_line_exit_2(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, out, err = cli("scan", "--state", str(blocker / "state.sqlite"), str(folder))
    assert code == 2 and err.count("\n") == 1 and str(blocker / "state.sqlite") in err and "--no-state" in err


def test_unwritable_default_location_scans_on_with_a_note(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    (folder / ".cachedoctor").write_text("not a folder")  # the state folder cannot be made here
    code, out, err = cli("scan", str(folder))
    assert (code, err) == (0, "") and "note: no state kept: cannot write" in out


def test_damaged_database_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    report(str(folder))
    db = folder / ".cachedoctor" / "state.sqlite"
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    code, out, err = cli("scan", str(folder))
    assert (code, err) == (0, "") and "could not be read" in out and "started a new one" in out
    (aside,) = (folder / ".cachedoctor").glob("state.sqlite.broken-*")
    assert aside.read_bytes() == b"this is not a database" * 100
    assert report(str(folder))[1]["summary"]["files_reused"] == 8


def test_config_file_turns_the_state_off(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    (tmp_path / "cachedoctor.toml").write_text("state = false\n")
    code, out, err = cli("scan", str(folder), cwd=str(tmp_path))
    assert code == 0 and not (folder / ".cachedoctor").exists()
    code, out, _ = cli("config", "show", cwd=str(tmp_path))
    assert any(line.startswith("state") and "off" in line and "cachedoctor.toml" in line for line in out.splitlines())


def test_dataset_scan_reuses_files_and_still_sees_a_changed_source(tmp_path: Path) -> None:
    from repair_factories import simpletuner

    ds = simpletuner(tmp_path, 4)
    settle(ds.root)
    assert report("--config", str(ds.config))[1]["findings"] == []
    source = ds.images[1]
    later = source.stat().st_mtime_ns + 10 * 10**9
    os.utime(source, ns=(later, later))  # the image was edited; its latent was not
    code, doc = report("--config", str(ds.config))
    assert doc["summary"]["files_reused"] == doc["summary"]["files_seen"]
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [("stale-entry", str(ds.latent_path(source)))]


# --- sampled deep reads ---------------------------------------------------------------------


def deep_reads(folder: Path) -> dict[str, int]:
    db = sqlite3.connect(folder / ".cachedoctor" / "state.sqlite")
    return {os.fsdecode(n): d for n, d in db.execute("SELECT name, deep_scan FROM files WHERE deep_scan IS NOT NULL")}


def sample_run(folder: Path, share: str) -> set[str]:
    """The files this run read deep (their deep_scan is this run's)."""
    result = scan([str(folder)], ScanOptions(workers=1, state="auto", sample=Sample.parse(share)))
    assert not result.errors
    reads = deep_reads(folder)
    latest = max(reads.values())
    return {n for n, d in reads.items() if d == latest}


def flat_cache(tmp_path: Path, n: int = 20) -> Path:
    folder = tmp_path / "flat"
    peers(folder, n)
    settle(folder)
    return folder


def test_sample_rotates_through_the_whole_cache(tmp_path: Path) -> None:
    folder = flat_cache(tmp_path)
    runs = [sample_run(folder, "3/10") for _ in range(4)]
    assert [len(r) for r in runs] == [6, 6, 6, 6]  # ceil(20 * 3/10)
    assert runs[0].isdisjoint(runs[1]) and runs[2].isdisjoint(runs[0] | runs[1])
    assert set().union(*runs) == {f"peer{i}.pt" for i in range(20)}  # four runs cover everything
    leftover = {f"peer{i}.pt" for i in range(20)} - (runs[0] | runs[1] | runs[2])
    assert leftover < runs[3] and runs[3] - leftover < runs[0]  # then the longest ago come back first


def test_sample_choice_is_deterministic(tmp_path: Path) -> None:
    folder = flat_cache(tmp_path)
    first = sample_run(folder, "25%")
    (folder / ".cachedoctor" / "state.sqlite").unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(folder / ".cachedoctor" / "state.sqlite") + suffix).unlink(missing_ok=True)
    assert sample_run(folder, "25%") == first and len(first) == 5


def test_sample_reads_new_files_first(tmp_path: Path) -> None:
    folder = flat_cache(tmp_path)
    for _ in range(2):
        sample_run(folder, "1/2")  # every file read deep once
    save_pt(folder / "new1.pt", latent(seed=40))
    save_pt(folder / "new2.pt", latent(seed=41))
    settle(folder)
    chosen = sample_run(folder, "5%")  # ceil(22 * 5%) = 2
    assert chosen == {"new1.pt", "new2.pt"}


def test_sample_finds_a_bad_crc_when_its_turn_comes(tmp_path: Path) -> None:
    folder = flat_cache(tmp_path, 10)
    victim = folder / "peer7.pt"
    flip_data_byte(victim)
    settle(folder)
    found_on = None
    for run_no in range(1, 6):
        code, doc = report("--sample", "1/5", str(folder))
        kinds = [(f["kind"], f["path"]) for f in doc["findings"]]
        if found_on is None and kinds:
            found_on = run_no
        if found_on is not None:  # once found it stays reported: the file has not changed since
            assert kinds == [("corrupt-archive", str(victim))]
    assert found_on is not None and found_on <= 5


@pytest.mark.parametrize(
    "share, message",
    [("0%", "above 0"), ("3/0", "expected a share"), ("abc", "expected a share"), ("11/10", "at most all")],
)
def test_bad_sample_is_one_line_exit_2(tmp_path: Path, share: str, message: str) -> None:
    code, _, err = cli("scan", "--sample", share, str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and message in err


def test_sample_needs_the_state(tmp_path: Path) -> None:
    code, _, err = cli("scan", "--no-state", "--sample", "5%", str(tmp_path))
    assert code == 2 and "state database" in err and err.count("\n") == 1


# --- concurrency ----------------------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_scans_keep_the_database_sound(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    for k in range(6):
        peers(folder / f"part{k}", 25)
    save_pt(folder / "part3" / "odd.pt", latent(c=16, seed=99))  # one shape-mismatch to agree on
    settle(folder)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cachedoctor",
                "scan",
                "--format",
                "json",
                "-j",
                "1",
                *(["--deep"] if i % 2 else []),
                str(folder),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    for code, out, err in results:
        assert (code, err) == (1, "")
        assert [(f["kind"], os.path.basename(f["path"])) for f in json.loads(out)["findings"]] == [
            ("shape-mismatch", "odd.pt")
        ]
    db = sqlite3.connect(folder / ".cachedoctor" / "state.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("SELECT count(*) FROM files").fetchone() == (151,)
    code, doc = report(str(folder))
    assert doc["summary"]["files_reused"] == 151 and code == 1


def test_network_file_systems_are_told_apart(tmp_path: Path) -> None:
    from cachedoctor.fsinfo import filesystem_type, is_network

    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /mnt/cache nfs4 rw 0 0\n"
        "/dev/sdb1 /mnt/cache/local xfs rw 0 0\n"
        "beegfs_nodev /mnt/bee fuse.beegfs rw 0 0\n"
        "/dev/sdc1 /mnt/with\\040space ext4 rw 0 0\n"
    )
    where = str(mounts)
    assert filesystem_type("/mnt/cache/vae/x.pt", where) == "nfs4" and is_network("/mnt/cache/vae", where)
    assert filesystem_type("/mnt/cache/local/x.pt", where) == "xfs" and not is_network("/mnt/cache/local", where)
    assert filesystem_type("/mnt/cachex", where) == "ext4"  # a name that only starts like the mount point
    assert is_network("/mnt/bee/cache", where)
    assert filesystem_type("/mnt/with space/c", where) == "ext4"


def test_state_on_a_local_disk_uses_wal(tmp_path: Path) -> None:
    folder = cache(tmp_path)
    report(str(folder))
    db = sqlite3.connect(folder / ".cachedoctor" / "state.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
