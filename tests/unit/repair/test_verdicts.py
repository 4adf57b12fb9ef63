"""repair's final scan takes repair's own deep verdict on a file it rewrote (``repair/verdicts.py``)
instead of reading it again, only while the file's stat says it holds the bytes judged; a file
changed since is read, and the verdict taken is the outcome a deep read of the file gives."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from factories import save_pt, saved_on, settle

from cachedoctor.repair.act import run_lossless
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, Stat
from cachedoctor.repair.verdicts import Verdicts
from cachedoctor.scan import ScanOptions, inspect_bytes, scan
from cachedoctor.scan.worker import inspect_path


def _tagged(path: Path, seed: int) -> Action:
    with saved_on("cuda:0"):
        save_pt(path, torch.randn(4, 8, 8, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16))
    return Action(ActionKind.REWRITE_CPU, str(path), str(path.parent), ("device-tagged",), before=Stat.of(str(path)))


def _placed(path: Path, data: bytes, *, future_mtime: bool = False) -> Verdicts:
    """``data`` judged in memory, written to a temp file and renamed over ``path`` as a batch
    does, the clock moved on between the write and the rename."""
    verdicts = Verdicts()
    verdicts.judged(str(path), inspect_bytes(str(path), data))
    temp = path.with_name(".new.tmp")
    temp.write_bytes(data)
    if future_mtime:  # a clock that did not move: the rename's change time is not past the write
        later = time.time_ns() + 60 * 10**9
        os.utime(temp, ns=(later, later))
    else:
        settle(path.parent)
    made = os.stat(temp)
    os.replace(temp, path)
    verdicts.placed(str(path), made)
    return verdicts


def _healthy_bytes(tmp_path: Path) -> bytes:
    return save_pt(tmp_path / "model.pt", torch.randn(4, 8, 8).to(torch.bfloat16)).read_bytes()


def test_the_verdict_taken_is_what_a_deep_read_of_the_file_gives(tmp_path: Path) -> None:
    data = _healthy_bytes(tmp_path)
    path = tmp_path / "a.pt"
    path.write_bytes(b"old")
    verdicts = _placed(path, data)
    assert len(verdicts) == 1
    assert verdicts.take(str(path), False) == inspect_path(str(path), deep=True)
    assert verdicts.take(str(path), True) == inspect_path(str(path), deep=True, entry_facts=True)


def test_a_file_rewritten_in_place_since_is_read_again(tmp_path: Path) -> None:
    data = _healthy_bytes(tmp_path)
    path = tmp_path / "a.pt"
    path.write_bytes(b"old")
    verdicts = _placed(path, data)
    made = os.stat(path)
    settle(tmp_path)
    with open(path, "r+b") as f:  # the same size, the same inode, the old mtime put back
        f.write(b"X")
    os.utime(path, ns=(made.st_atime_ns, made.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == made.st_mtime_ns and os.stat(path).st_size == made.st_size
    assert verdicts.take(str(path), False) is None


def test_no_verdict_is_kept_where_the_clock_did_not_move_before_the_rename(tmp_path: Path) -> None:
    path = tmp_path / "a.pt"
    path.write_bytes(b"old")
    verdicts = _placed(path, _healthy_bytes(tmp_path), future_mtime=True)
    assert len(verdicts) == 0 and verdicts.take(str(path), False) is None


def test_no_verdict_is_kept_for_a_file_written_between_the_rename_and_its_stat(tmp_path: Path) -> None:
    data = _healthy_bytes(tmp_path)
    path = tmp_path / "a.pt"
    verdicts = Verdicts()
    verdicts.judged(str(path), inspect_bytes(str(path), data))
    temp = tmp_path / ".new.tmp"
    temp.write_bytes(data)
    made = os.stat(temp)
    settle(tmp_path)
    os.replace(temp, path)
    with open(path, "r+b") as f:  # another writer, before repair looked
        f.write(b"X")
    verdicts.placed(str(path), made)
    assert len(verdicts) == 0


def test_the_rescan_reads_only_what_changed_since_repair_put_it_in_place(tmp_path: Path) -> None:
    """Two device-tagged files rewritten by a batch; then another writer puts a device-tagged
    file at b.pt. The scan with the batch's verdicts takes a.pt's and reads b.pt, which it finds
    device-tagged again."""
    actions = [_tagged(tmp_path / "a.pt", 1), _tagged(tmp_path / "b.pt", 2)]
    verdicts = Verdicts()
    results: list[ItemResult] = []
    settle(tmp_path)
    run_lossless(actions, "run", results.append, results.extend, verdicts)
    assert [r.state for r in results] == [ItemState.VERIFIED, ItemState.VERIFIED]
    # kept where the rename came in a later clock tick than the write (all of them, on a file
    # system with fine-grained timestamps)
    kept = sum(os.stat(a.path).st_ctime_ns > os.stat(a.path).st_mtime_ns for a in actions)
    assert len(verdicts) == kept
    clean = scan([str(tmp_path)], ScanOptions(deep=True, workers=1, known=verdicts))
    assert (clean.findings, clean.stats.files_read, clean.stats.files_reused) == ([], 2, kept)
    _tagged(tmp_path / "b.pt", 3)
    again = scan([str(tmp_path)], ScanOptions(deep=True, workers=1, known=verdicts))
    assert [(f.kind, os.path.basename(f.path)) for f in again.findings] == [("device-tagged", "b.pt")]
    assert again.stats.files_reused == (1 if verdicts.take(str(tmp_path / "a.pt"), False) else 0)


def test_a_quick_scan_takes_no_deep_verdict(tmp_path: Path) -> None:
    path = tmp_path / "a.pt"
    path.write_bytes(b"old")
    verdicts = _placed(path, _healthy_bytes(tmp_path))
    assert len(verdicts) == 1
    quick = scan([str(tmp_path)], ScanOptions(deep=False, workers=1, known=verdicts))
    assert quick.stats.files_reused == 0 and quick.stats.files_read == 2
