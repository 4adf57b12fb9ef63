"""``bit-rot``: bytes that changed under an unchanged stat are caught by the next deep read.

Two ways to change a file's bytes without its stat: for real, by writing into the block device
under an unmounted ext4 file system (root and loop devices only), and by telling the state
database that the file's current stat is the one its last deep read saw (what a disk's rot looks
like to the scan, on any machine).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from factories import latent, peers, save_pt, settle

from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.state.db import seal, unseal


def _rot_under_the_state(state: Path, path: Path) -> None:
    """Flip one data byte of ``path``, then record its new stat as the one its last deep read
    saw: to the state database, the file's stat never changed (as after rot below the file system)."""
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # the middle of a [4,64,64] latent's data
    path.write_bytes(bytes(raw))
    _reseal_stat(state, path)


def _kinds(result: object, path: Path) -> list[str]:
    return sorted(f.kind for f in result.findings if f.path == str(path))  # type: ignore[attr-defined]


def _cache(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "cache"
    peers(folder, 4, h=64, w=64)
    target = save_pt(folder / "item.pt", latent(h=64, w=64, seed=99))
    settle(folder)
    return folder, target


def test_a_deep_rescan_finds_bytes_changed_under_an_unchanged_stat(tmp_path: Path) -> None:
    folder, target = _cache(tmp_path)
    options = ScanOptions(workers=1, state="auto", deep=True)
    assert scan([str(folder)], options).findings == []
    _rot_under_the_state(folder / ".cachedoctor" / "state.sqlite", target)
    settle(folder)
    again = scan([str(folder)], options)
    rot = [f for f in again.findings if f.kind == "bit-rot"]
    assert [f.path for f in rot] == [str(target)]
    assert rot[0].severity.value == "error" and rot[0].fix.value == "recompute"
    assert rot[0].details["recorded_xxh3"] != rot[0].details["xxh3"]
    # torch.save's zip records each member's CRC: the flipped byte fails it as well
    assert _kinds(again, target) == ["bit-rot", "corrupt-archive"]
    # the good digest is kept: the next deep read says it again, and a quick rescan reuses it
    assert _kinds(scan([str(folder)], options), target) == ["bit-rot", "corrupt-archive"]
    quick = scan([str(folder)], ScanOptions(workers=1, state="auto"))
    assert "bit-rot" in _kinds(quick, target) and quick.stats.files_reused == 5


def test_a_quick_rescan_does_not_judge_bytes_and_an_honest_rewrite_is_no_rot(tmp_path: Path) -> None:
    folder, target = _cache(tmp_path)
    state = folder / ".cachedoctor" / "state.sqlite"
    assert scan([str(folder)], ScanOptions(workers=1, state="auto", deep=True)).findings == []
    _rot_under_the_state(state, target)
    settle(folder)
    assert scan([str(folder)], ScanOptions(workers=1, state="auto")).findings == []  # stat only: unseen
    save_pt(target, latent(h=64, w=64, seed=7))  # a writer: new ctime, so new content is expected
    settle(folder)
    assert scan([str(folder)], ScanOptions(workers=1, state="auto", deep=True)).findings == []


def test_the_sampled_share_compares_too(tmp_path: Path) -> None:
    from cachedoctor.scan.state.sample import Sample

    folder, target = _cache(tmp_path)
    state = folder / ".cachedoctor" / "state.sqlite"
    scan([str(folder)], ScanOptions(workers=1, state="auto", deep=True))
    _rot_under_the_state(state, target)
    settle(folder)
    sampled = scan([str(folder)], ScanOptions(workers=1, state="auto", sample=Sample.parse("100%")))
    assert "bit-rot" in _kinds(sampled, target)


def test_a_file_that_no_longer_parses_is_rot_too(tmp_path: Path) -> None:
    """A safetensors file carries no CRC: a rotten header byte makes it unreadable, and only the
    record of its clean deep read says the bytes changed rather than the writer failed."""
    from safetensors.torch import save_file

    folder = tmp_path / "cache"
    folder.mkdir()
    for i in range(4):
        save_file({"latent": latent(h=16, w=16, seed=i)}, str(folder / f"p{i}.safetensors"))
    target = folder / "p3.safetensors"
    settle(folder)
    options = ScanOptions(workers=1, state="auto", deep=True)
    assert scan([str(folder)], options).findings == []
    raw = bytearray(target.read_bytes())
    raw[0] ^= 0xFF  # the header length: the file no longer parses
    target.write_bytes(bytes(raw))
    _reseal_stat(folder / ".cachedoctor" / "state.sqlite", target)
    settle(folder)
    kinds = _kinds(scan([str(folder)], options), target)
    assert "bit-rot" in kinds and "corrupt-archive" in kinds


def _reseal_stat(state: Path, path: Path) -> None:
    """Record ``path``'s current stat as the one its last deep read saw (bytes already changed)."""
    st = path.stat()
    db = sqlite3.connect(state)
    name = os.fsencode(path.name)
    folder, size, mtime, ctime, ino, racy, deep_scan, xxh3, outcome = db.execute(
        "SELECT folder, size, mtime_ns, ctime_ns, ino, racy, deep_scan, xxh3, outcome FROM files WHERE name = ?",
        (name,),
    ).fetchone()
    body = unseal(outcome, folder, name, size, mtime, ctime, ino, racy, deep_scan, xxh3)
    assert body is not None and xxh3
    new = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    sealed = seal(folder, name, size, *new, racy, deep_scan, xxh3, body) + "|" + body
    db.execute("UPDATE files SET mtime_ns = ?, ctime_ns = ?, ino = ?, outcome = ? WHERE name = ?", (*new, sealed, name))
    db.execute("DELETE FROM folders")
    db.commit()
    db.close()


def _can_loop_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mkfs.ext4") is not None and shutil.which("mount") is not None


@pytest.mark.skipif(not _can_loop_mount(), reason="needs root, mkfs.ext4 and loop devices")
def test_real_rot_below_an_ext4_file_system(tmp_path: Path) -> None:
    """The real thing: a byte flipped in the block device while the file system is unmounted
    leaves the file's size, times and inode as they were."""
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    if subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("loop mount refused here")
    state = tmp_path / "state.sqlite"
    try:
        folder = mnt / "cache"
        peers(folder, 4, h=64, w=64)
        target = save_pt(folder / "item.pt", latent(h=64, w=64, seed=99))
        settle(folder)
        options = ScanOptions(workers=1, state=str(state), deep=True)
        assert scan([str(folder)], options).findings == []
        before = target.stat()
        marker = target.read_bytes()[-4096:-3000]  # data unique to this file
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    raw = bytearray(image.read_bytes())
    at = raw.find(marker)
    assert at > 0 and raw.find(marker, at + 1) == -1
    raw[at + 100] ^= 0x01
    image.write_bytes(bytes(raw))
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        after = target.stat()
        assert (after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino) == (
            before.st_size,
            before.st_mtime_ns,
            before.st_ctime_ns,
            before.st_ino,
        )
        again = scan([str(folder)], options)
        assert _kinds(again, target) == ["bit-rot", "corrupt-archive"]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_dry_run_repair_sees_the_rot_and_writes_nothing(tmp_path: Path) -> None:
    """``repair --dry-run`` plans what ``repair`` would: it reads scan's record (the digests)
    read-only, and leaves the database byte for byte as it was, with no -wal or -shm beside it."""
    from tests.cli_run import cli

    folder, target = _cache(tmp_path)
    state = folder / ".cachedoctor" / "state.sqlite"
    assert scan([str(folder)], ScanOptions(workers=1, state="auto", deep=True)).findings == []
    _rot_under_the_state(state, target)
    settle(folder)
    before = {p.name: p.read_bytes() for p in state.parent.iterdir()}
    code, out, err = cli("repair", str(folder), "--dry-run", "--workers", "1")
    assert (code, err) == (1, "")
    said = " ".join(out.split())
    assert "item.pt: bit-rot, corrupt-archive" in said and "dry run: nothing was changed" in said
    assert {p.name: p.read_bytes() for p in state.parent.iterdir()} == before


def test_a_dry_run_reads_a_named_state_database_read_only_and_creates_none(tmp_path: Path) -> None:
    from tests.cli_run import cli

    folder, target = _cache(tmp_path)
    named = tmp_path / "elsewhere" / "st.sqlite"
    named.parent.mkdir()
    assert scan([str(folder)], ScanOptions(workers=1, state=str(named), deep=True)).findings == []
    _rot_under_the_state(named, target)
    settle(folder)
    before = {p.name: p.read_bytes() for p in named.parent.iterdir()}
    code, out, _ = cli("repair", str(folder), "--dry-run", "--workers", "1", "--state", str(named))
    assert code == 1 and "bit-rot" in out
    assert {p.name: p.read_bytes() for p in named.parent.iterdir()} == before
    fresh = tmp_path / "new" / "sub" / "fresh.sqlite"
    code, out, _ = cli("repair", str(folder), "--dry-run", "--workers", "1", "--state", str(fresh))
    assert code == 1 and "corrupt-archive" in out and "bit-rot" not in out  # no record: the CRC alone says it
    assert not (tmp_path / "new").exists()
