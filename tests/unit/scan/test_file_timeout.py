"""No file can stall a scan: ``--file-timeout`` reports a file whose read runs too long and goes
on with the others (issue 11). The stall is real: a blocking ``open`` of a FIFO that no writer
ever opens (storage that hangs looks the same to a reader). The scan itself never opens a FIFO
(issue 15: it is skipped with a note), so the tests have the worker's read of ``stall.pt``, a
regular file, go through that FIFO first, as a read that hangs in the kernel would.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import peers

from cachedoctor.formats import read_file
from cachedoctor.scan.folders import Collector
from cachedoctor.scan.pool import run_pool
from cachedoctor.scan.worker import inspect_chunk


def _stall(folder: Path, monkeypatch: pytest.MonkeyPatch, name: str = "stall.pt") -> str:
    """A file whose read blocks for good (a forked worker inherits the patch)."""
    path = folder / name
    path.write_bytes(b"PK\x03\x04")
    fifo = folder / "no-writer.fifo"
    os.mkfifo(fifo)

    def hanging_read(target: str, **options: object) -> object:
        if target == str(path):
            with open(fifo, "rb"):  # blocks until a writer comes, which none does
                pass
        return read_file(target, **options)  # type: ignore[arg-type]

    monkeypatch.setattr("cachedoctor.scan.worker.read_file", hanging_read)
    return str(path)


def test_the_alarm_reports_a_stalled_read_and_the_chunk_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = peers(tmp_path, n=1)[0]
    stall = _stall(tmp_path, monkeypatch)
    outcomes = inspect_chunk([(stall, False), (str(good), False)], timeout=0.3)
    assert [(f.kind, f.details["seconds"]) for f in outcomes[0].findings] == [("read-timeout", 0.3)]
    assert outcomes[0].transient  # not kept in the state database: the next scan tries again
    assert outcomes[1].path == str(good) and outcomes[1].status == "read" and outcomes[1].findings == ()


@contextlib.contextmanager
def _no_alarm(seconds: float | None) -> Iterator[object]:
    yield lambda on: None


@pytest.mark.slow
def test_a_worker_stuck_where_its_alarm_cannot_reach_is_killed_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's backstop: with the workers' own alarm switched off (as a C call that never
    returns to Python would switch it off), the stuck worker is killed, the file reported, and
    every other file of the chunks in flight still judged, by a fresh pool."""
    monkeypatch.setattr("cachedoctor.scan.worker.file_timer", _no_alarm)  # inherited by the forked workers
    files = [str(p) for p in peers(tmp_path, n=5)]
    stall = _stall(tmp_path, monkeypatch)
    collector = Collector(None)
    folder = collector.open_folder(str(tmp_path), 3)
    chunks = [
        (folder, [(files[0], False), (stall, False), (files[1], False)], False, False),
        (folder, [(files[2], False), (files[3], False)], False, False),
        (folder, [(files[4], False)], False, False),
    ]
    run_pool(iter(chunks), 2, collector, 0.3)
    assert [(f.kind, f.path) for f in collector.findings] == [("read-timeout", stall)]
    assert collector.stats.files_seen == 6 and collector.stats.files_read == 6
    assert collector.folders == {}  # the folder closed: every chunk came back exactly once


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "86400"])
def test_file_timeout_has_the_same_bounds_on_the_command_line_as_in_the_settings(tmp_path: Path, value: str) -> None:
    import io

    from cachedoctor.cli import run
    from cachedoctor.cli.environment import Environment

    out, err = io.StringIO(), io.StringIO()
    code = run(
        ["scan", str(tmp_path), "--file-timeout", value],
        Environment(stdout=out, stderr=err, cwd=str(tmp_path), environ={}),
    )
    assert code == 2 and err.getvalue().count("\n") == 1
    assert "--file-timeout: expected a number of seconds greater than 0 and under 86400 (a day)" in err.getvalue()
    err = io.StringIO()
    code = run(
        ["scan", str(tmp_path)],
        Environment(stdout=io.StringIO(), stderr=err, cwd=str(tmp_path), environ={"CACHEDOCTOR_FILE_TIMEOUT": value}),
    )
    assert code == 2 and "expected a number of seconds greater than 0 and under 86400 (a day)" in err.getvalue()


def test_file_timeout_comes_from_the_config_file_too(tmp_path: Path) -> None:
    from cachedoctor.settings import resolve

    (tmp_path / "cachedoctor.toml").write_text("file-timeout = 2.5\n")
    settings = resolve({}, {}, str(tmp_path))
    assert settings.file_timeout.value == 2.5 and settings.file_timeout.source.endswith("cachedoctor.toml")
    assert resolve({}, {"CACHEDOCTOR_FILE_TIMEOUT": "4"}, str(tmp_path)).file_timeout.value == 4.0


def test_a_waiting_read_gets_three_times_the_limit_a_busy_one_does_not() -> None:
    """A healthy file on a loaded machine once timed out after 10 s of waiting: a read that
    waits (no CPU) is given ``STARVED`` times the limit, one that burns CPU only the limit."""
    import time

    from cachedoctor.scan.watchdog import STARVED, FileTimeout, file_timer, overdue

    assert overdue(1.0, 0.5, 1.0) and not overdue(1.0, 0.1, 1.0) and overdue(STARVED * 1.0, 0.0, 1.0)
    with file_timer(0.4) as arm:
        arm(True)
        time.sleep(0.6)  # waiting: past the limit, within STARVED times it
        arm(False)
    with pytest.raises(FileTimeout), file_timer(0.4) as arm:
        arm(True)
        end = time.monotonic() + 5
        while time.monotonic() < end:  # busy: stopped soon after 0.4 s
            pass
        arm(False)


def test_a_slot_read_between_the_workers_writes_is_not_a_stuck_file() -> None:
    """The parent reads a worker's slot (pid, file index, start) without a lock. Caught after a
    fresh slot's index was written but before its start time (still 0 from take()), it once read
    "on this file since boot" and killed a healthy worker: a clean SDXL file was reported as a
    read-timeout by a 2-worker scan on an idle machine."""
    import multiprocessing
    import time

    from cachedoctor.scan.watchdog import Slots

    slots = Slots(2, multiprocessing.get_context("fork"))
    slot = slots.take()
    slots.array[slot * 3 : slot * 3 + 2] = [float(os.getpid()), 0.0]  # pid and index written, start not yet
    assert slots.stuck(slot, 10.0) is None
    slots.array[slot * 3 + 2] = time.monotonic() - 100.0  # on file 0 for 100 s: stuck indeed
    assert slots.stuck(slot, 10.0) == (os.getpid(), 0)
