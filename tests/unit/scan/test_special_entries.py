"""Entries that are no regular file, under a cache name (issue 15): a dangling symlink or a loop
is a ``broken-link`` finding, judged from the link alone; a FIFO, socket or device is skipped
with a note and never opened (a FIFO would block the read); and ``--deep`` does not stream a
file that no reader claims. Each test plants one such entry next to healthy peers."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from factories import latent, peers, save_pt, settle

from cachedoctor.formats import ReadError, Tally, UnreadableFile, read_file
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.walk import walk
from cachedoctor.scan.worker import inspect_chunk

QUICK = ScanOptions(workers=1)


def _kinds(result) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(f.kind, os.path.basename(f.path)) for f in result.findings]


def test_the_walk_lists_a_dangling_link_with_the_files_and_a_fifo_apart(tmp_path: Path) -> None:
    peers(tmp_path, n=2)
    (tmp_path / "broken.pt").symlink_to("/nonexistent/broken.pt")
    os.mkfifo(tmp_path / "pipe.pt")
    (tmp_path / "null.pt").symlink_to("/dev/null")
    os.mkfifo(tmp_path / "pipe.txt")  # not a cache name: left alone, as before
    (tmp_path / "gone.txt").symlink_to("/nonexistent")
    errors: list = []
    [folder] = list(walk([str(tmp_path)], errors))
    assert errors == []
    assert [os.path.basename(f) for f in folder.files] == ["broken.pt", "peer0.pt", "peer1.pt"]
    assert [(os.path.basename(p), kind) for p, kind in folder.special] == [
        ("null.pt", "character device"),
        ("pipe.pt", "FIFO"),
    ]


def test_a_dangling_link_is_a_broken_link_finding(tmp_path: Path) -> None:
    peers(tmp_path, n=2)
    (tmp_path / "broken.pt").symlink_to("/nonexistent/latent.pt")
    result = scan([str(tmp_path)], QUICK)
    [finding] = result.findings
    assert (finding.kind, finding.severity.value, finding.fix.value) == ("broken-link", "error", "quarantine")
    assert finding.path == str(tmp_path / "broken.pt")
    assert dict(finding.details) == {"target": "/nonexistent/latent.pt", "problem": "dangling"}
    assert result.errors == [] and result.stats.files_read == 3


def test_a_symlink_loop_is_a_broken_link_finding_not_an_unreadable_file(tmp_path: Path) -> None:
    peers(tmp_path, n=2)
    (tmp_path / "loop.pt").symlink_to("loop.pt")
    result = scan([str(tmp_path)], QUICK)
    assert result.errors == []
    assert [(f.kind, dict(f.details)) for f in result.findings] == [
        ("broken-link", {"target": "loop.pt", "problem": "loop"})
    ]


def test_a_symlink_loop_under_another_name_is_left_alone_like_a_dangling_link(tmp_path: Path) -> None:
    """No loader opens ``loopa``: it fails no gate, as a dangling link under another name does not."""
    peers(tmp_path, n=2)
    (tmp_path / "loopa").symlink_to("loopb")
    (tmp_path / "loopb").symlink_to("loopa")
    (tmp_path / "dangling").symlink_to("/nonexistent")
    result = scan([str(tmp_path)], QUICK)
    assert (result.errors, result.findings, result.stats.files_read) == ([], [], 2)


def test_a_link_to_a_real_file_is_read_as_that_file(tmp_path: Path) -> None:
    peers(tmp_path / "cache", n=2)
    real = save_pt(tmp_path / "elsewhere" / "real.pt", latent(seed=7))
    (tmp_path / "cache" / "linked.pt").symlink_to(real)
    result = scan([str(tmp_path / "cache")], QUICK)
    assert result.findings == [] and result.stats.files_read == 3
    assert result.stats.formats["torch-zip"] == 3


def test_a_fifo_named_like_a_cache_file_is_skipped_with_a_note(tmp_path: Path) -> None:
    peers(tmp_path, n=2)
    os.mkfifo(tmp_path / "pipe.pt")  # opening it for reading would block: no writer ever comes
    result = scan([str(tmp_path)], QUICK)
    assert (result.findings, result.errors) == ([], [])
    assert (result.stats.files_seen, result.stats.files_read, result.stats.files_skipped) == (3, 2, 1)
    assert result.notes == [f"skipped 1 special file (FIFO): {tmp_path / 'pipe.pt'}"]


def test_a_socket_is_skipped_with_a_note(tmp_path: Path) -> None:
    peers(tmp_path, n=2)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(tmp_path / "sock.pt"))
        result = scan([str(tmp_path)], QUICK)
    finally:
        server.close()
    assert result.findings == [] and result.stats.files_skipped == 1
    assert result.notes == [f"skipped 1 special file (socket): {tmp_path / 'sock.pt'}"]


def test_many_special_files_make_one_note(tmp_path: Path) -> None:
    peers(tmp_path, n=2)
    for i in range(7):
        os.mkfifo(tmp_path / f"p{i}.pt")
    (tmp_path / "tty.pt").symlink_to("/dev/null")
    [note] = scan([str(tmp_path)], QUICK).notes
    shown = ", ".join(str(tmp_path / f"p{i}.pt") for i in range(5))
    assert note == f"skipped 8 special files (FIFO, character device): {shown} and 3 more"


def test_a_fifo_that_replaced_a_file_since_the_listing_is_not_opened(tmp_path: Path) -> None:
    """The worker's own guard: the listing saw a file, the read finds a FIFO. Were it opened
    as before, the read would block until the file timeout (a read-timeout finding)."""
    good = peers(tmp_path, n=1)[0]
    pipe = tmp_path / "was-a-file.pt"
    os.mkfifo(pipe)
    [outcome, other] = inspect_chunk([(str(pipe), False), (str(good), False)], timeout=5.0)
    assert (outcome.status, outcome.special, outcome.findings) == ("skipped", "FIFO", ())
    assert other.status == "read" and other.findings == ()


def test_read_file_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.pt")
    try:
        read_file(str(tmp_path / "pipe.pt"), deep=True)
    except UnreadableFile as exc:
        assert (exc.problem, exc.details) == ("special-file", {"type": "FIFO"})
    else:
        raise AssertionError("a FIFO was read")


def test_a_file_that_became_a_fifo_after_the_state_recorded_it(tmp_path: Path) -> None:
    """The rescan path: the state database recorded ``2.pt``; it is a FIFO now."""
    files = peers(tmp_path, n=3)
    settle(tmp_path)
    options = ScanOptions(workers=1, state="auto")
    assert scan([str(tmp_path)], options).stats.files_read == 3
    files[2].unlink()
    os.mkfifo(files[2])
    again = scan([str(tmp_path)], options)
    assert (again.findings, again.errors) == ([], [])
    assert (again.stats.files_read, again.stats.files_skipped) == (2, 1)
    assert again.notes == [f"skipped 1 special file (FIFO): {files[2]}"]


def test_deep_does_not_stream_a_large_file_no_reader_claims(tmp_path: Path) -> None:
    """A 2 GB sparse file (it costs no disk) under a cache name and one under a foreign name:
    the quick pass judges both from their first bytes, and so must the deep one (it used to
    map and read all of them: 32 s for 50 GB). ``io_bytes`` is what the readers took."""
    peers(tmp_path, n=2)
    for name in ("huge.pt", "video.mkv"):
        with open(tmp_path / name, "wb") as out:
            out.truncate(2 << 30)
    result = scan([str(tmp_path)], ScanOptions(workers=1, deep=True))
    assert [(f.kind, f.details["problem"], os.path.basename(f.path)) for f in result.findings] == [
        ("corrupt-archive", "unknown-format", "huge.pt")
    ]
    assert result.stats.files_skipped == 1  # video.mkv: foreign
    healthy = sum(p.stat().st_size for p in tmp_path.glob("peer*.pt"))
    assert healthy <= result.stats.io_bytes < healthy + (1 << 20)  # the peers whole, the sparse files a head each
    assert result.stats.bytes_read == healthy + (2 << 30)  # the files' sizes, as before


def test_deep_does_not_read_a_foreign_archive_a_quick_read_calls_foreign(tmp_path: Path) -> None:
    """Under a foreign name, a file some reader claims but a quick read calls foreign (here a
    tar, which is no torch file) is not read whole either."""
    import tarfile

    peers(tmp_path, n=2)
    big = tmp_path / "payload.bin.part"
    with open(big, "wb") as out:
        out.truncate(64 << 20)
    with tarfile.open(tmp_path / "images.tar", "w") as tar:
        tar.add(big, arcname="payload")
    big.unlink()
    size = (tmp_path / "images.tar").stat().st_size
    tally = Tally()
    try:
        read_file(str(tmp_path / "images.tar"), deep=True, tally=tally)
    except ReadError as exc:
        assert exc.problem == "legacy-tar"
    assert tally.taken == size  # what read_file alone does: the tar reader claims it, so it reads deep
    result = scan([str(tmp_path)], ScanOptions(workers=1, deep=True))
    assert (result.findings, result.stats.files_skipped) == ([], 1)
    assert result.stats.io_bytes < sum(p.stat().st_size for p in tmp_path.glob("peer*.pt")) + (1 << 20)


def test_a_deep_read_counts_the_whole_file_and_a_quick_one_its_head(tmp_path: Path) -> None:
    one = save_pt(tmp_path / "big.pt", latent(c=4, h=256, w=256))  # 1 MiB of data
    tally = Tally()
    read_file(str(one), deep=True, tally=tally)
    assert tally.taken == one.stat().st_size
    quick = Tally()
    read_file(str(one), deep=False, tally=quick)
    assert 0 < quick.taken < one.stat().st_size // 10
