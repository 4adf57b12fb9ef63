"""The scanner bounded in every mode (issue 27): every file is read in a worker process the
parent watches, ``--workers 1`` included, under a memory cap (``scan/_memcap.py``) and the time
watchdog (``scan/watchdog.py``); a file that defeats either is reported and the scan goes on.

The hostile reads are planted in the readers (a forked worker inherits the test's patches), so
that each test exercises the bound itself, whatever the readers learn to refuse on their own;
the memory cap is also shown against a real bomb (``fixtures/builders/scanner_bombs.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import peers

from cachedoctor.formats import read_file
from cachedoctor.scan import ScanOptions, scan
from cachedoctor.scan.watchdog import GRACE, STARVED

REPO = Path(__file__).resolve().parents[3]


def _plant(monkeypatch: pytest.MonkeyPatch, target: str, hostile: object) -> None:
    """``hostile(path)`` runs instead of the reader for ``target`` (in the forked worker)."""

    def read(path: str, **options: object) -> object:
        if path == target:
            hostile(path)  # type: ignore[operator]
        return read_file(path, **options)  # type: ignore[arg-type]

    monkeypatch.setattr("cachedoctor.scan.worker.read_file", read)


def _findings(result: object) -> list[tuple[str, str, str | None]]:
    return [(f.kind, os.path.basename(f.path), f.details.get("problem")) for f in result.findings]  # type: ignore[attr-defined]


def _busy_past_signals(path: str) -> None:
    """A read stuck in code that no signal reaches (a C call under a hash flood, a decompressor):
    SIGALRM blocked, the CPU busy for good."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        pass


@pytest.mark.slow
def test_one_worker_scan_stops_a_busy_file_the_alarm_cannot_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers 1`` once read in the scan's own process, with no watchdog: a hash-flood file
    ran past 180 s. Now the parent kills the worker once the file has burnt the CPU for the
    limit plus ``GRACE`` (not ``STARVED`` times the limit: it reads the worker's CPU time),
    reports the file, and reads the others in a fresh worker."""
    good = peers(tmp_path, n=3)
    stuck = tmp_path / "flood.pt"
    stuck.write_bytes(b"PK\x03\x04")
    _plant(monkeypatch, str(stuck), _busy_past_signals)
    started = time.monotonic()
    result = scan([str(tmp_path)], ScanOptions(workers=1, file_timeout=1.0))
    elapsed = time.monotonic() - started
    assert _findings(result) == [("read-timeout", "flood.pt", "timeout")]
    assert result.stats.files_read == len(good) + 1 and not result.errors
    assert elapsed < STARVED * 1.0 + GRACE, elapsed  # stopped as busy, not as waiting


def test_a_file_past_the_memory_cap_is_reported_and_the_scan_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that allocates past the cap gets a MemoryError in the worker: the file cannot be
    shown safe within bounds, so it is ``unsafe-pickle`` (``resource-bomb``); the worker frees
    the memory and judges the next files."""
    peers(tmp_path, n=2)
    hungry = tmp_path / "hungry.pt"
    hungry.write_bytes(b"PK\x03\x04")
    _plant(monkeypatch, str(hungry), lambda path: bytearray(256 << 20))
    result = scan([str(tmp_path)], ScanOptions(workers=1, file_memory=64 << 20))
    assert _findings(result) == [("unsafe-pickle", "hungry.pt", "resource-bomb")]
    (finding,) = result.findings
    assert "reading it needed more than 64 MiB" in finding.message
    assert result.stats.files_read == 3 and not result.errors


def test_without_a_cap_the_same_read_succeeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted allocation is what the cap refuses, not something the machine cannot give."""
    peers(tmp_path, n=1)
    hungry = tmp_path / "hungry.pt"
    hungry.write_bytes(b"PK\x03\x04")
    _plant(monkeypatch, str(hungry), lambda path: bytearray(256 << 20))
    result = scan([str(tmp_path)], ScanOptions(workers=1, file_memory=None))
    assert [f.kind for f in result.findings if f.path == str(hungry)] != ["unsafe-pickle"]


def _die(path: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # an allocation that aborts, the kernel's OOM killer


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_that_kills_its_reader_is_reported_and_every_other_file_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """A worker that dies takes the whole pool down without saying which file did it: each chunk
    that was on a file is sent again with that file first, read alone; the file whose reader
    dies again alone is reported, and no innocent file is."""
    files = peers(tmp_path, n=6)
    deadly = tmp_path / "deadly.pt"
    deadly.write_bytes(b"PK\x03\x04")
    _plant(monkeypatch, str(deadly), _die)
    result = scan([str(tmp_path)], ScanOptions(workers=workers, chunk_size=2))
    assert _findings(result) == [("unsafe-pickle", "deadly.pt", "resource-bomb")]
    assert "its reader process died" in result.findings[0].message
    assert result.stats.files_read == len(files) + 1 and not result.errors


def test_a_member_inflating_past_the_cap_is_streamed_not_held(tmp_path: Path) -> None:
    """An npz whose member inflates to 256 MiB of zeros (256 KB on disk, under the 512 MiB bomb
    size: a trainer's savez_compressed could write it): the deep read streams its CRC in pieces
    instead of holding it, so a worker capped at 64 MiB judges it, clean, and the cap never
    trips (it tripped, as a false resource-bomb, while members up to 256 MiB were held)."""
    sys.path.insert(0, str(REPO))
    from fixtures.builders.scanner_bombs import npz_bomb

    peers(tmp_path, n=1)
    npz_bomb(tmp_path / "big.npz", inflated=256 << 20)
    result = scan([str(tmp_path)], ScanOptions(workers=1, deep=True, file_memory=64 << 20))
    assert [f for f in result.findings if f.path.endswith("big.npz")] == []
    assert result.stats.files_read == 2 and not result.errors


_NO_BYTES_IN_THE_PARENT = """
import json, os, sys
cache = sys.argv[1]
parent, opened = os.getpid(), []
def hook(event, args):
    if event == "open" and os.getpid() == parent and str(args[0]).startswith(cache):
        opened.append(str(args[0]))
sys.addaudithook(hook)
from cachedoctor.scan import ScanOptions, scan
for workers in (1, 2):
    for deep in (False, True):
        result = scan([cache], ScanOptions(workers=workers, deep=deep))
        assert result.stats.files_read == 3, result.stats
print(json.dumps(opened))
"""


def test_the_parent_never_opens_a_cache_file(tmp_path: Path) -> None:
    """The process that must survive a bomb never reads one: every open of a cache file, quick
    or deep, one worker or two, happens in a worker (an audit hook in the parent, which the
    forked workers inherit but whose record stays theirs)."""
    cache = tmp_path / "cache"
    peers(cache, n=3)
    out = subprocess.run(
        [sys.executable, "-c", _NO_BYTES_IN_THE_PARENT, str(cache)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.slow
def test_a_real_hash_flood_is_judged_within_the_timeout_with_one_worker(tmp_path: Path) -> None:
    """The issue's file: a dict of 240,000 integer keys that all hash to 0, in batches of 1,000
    (under every walk limit). Today's walker keeps its keys in a dict and stalls for minutes;
    with one worker there was no watchdog at all. It is judged within the timeout (reported
    as a timeout, or as a bomb by a walker that sees it for what it is), and the other file read."""
    sys.path.insert(0, str(REPO))
    from fixtures.builders.scanner_bombs import hash_flood

    peers(tmp_path, n=1)
    (tmp_path / "flood.pt").write_bytes(hash_flood())
    started = time.monotonic()
    result = scan([str(tmp_path)], ScanOptions(workers=1, file_timeout=1.0))
    assert time.monotonic() - started < STARVED * 1.0 + GRACE
    assert [(k, name) for k, name, _ in _findings(result)] in (
        [("read-timeout", "flood.pt")],
        [("unsafe-pickle", "flood.pt")],
    )
    assert result.stats.files_read == 2 and not result.errors


_QUICK_WORKER_MODULES = """
import json, sys
import cachedoctor.scan.worker as worker
from cachedoctor.scan import ScanOptions, scan
real, out = worker.inspect_chunk, sys.argv[2]
def chunk(*args, **kwargs):
    outcomes = real(*args, **kwargs)
    with open(out, "w") as f:  # in the worker: what the reads imported
        json.dump(sorted(m for m in ("torch", "numpy") if m in sys.modules), f)
    return outcomes
worker.inspect_chunk = chunk
import cachedoctor.scan.pool as pool
pool.inspect_chunk = chunk
result = scan([sys.argv[1]], ScanOptions(workers=1))
assert result.stats.files_read == 2, result.stats
"""


def test_a_quick_scan_worker_imports_neither_torch_nor_numpy(tmp_path: Path) -> None:
    """The quick path's promise (``tests/unit/formats``) held where the reads now happen: in the
    worker, not the parent."""
    import numpy as np
    from factories import latent, save_pt, write_npz

    cache = tmp_path / "cache"
    cache.mkdir()
    save_pt(cache / "a.pt", {"x": latent()})
    write_npz(cache / "b.npz", latents=np.zeros(3, np.float32))
    record = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", _QUICK_WORKER_MODULES, str(cache), str(record)],
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert json.loads(record.read_text()) == []


def _busy(*args: object, **kwargs: object) -> None:
    while True:  # Python code: the alarm reaches it (a C call would not: see the pool's tests)
        pass


@pytest.mark.slow
def test_repairs_own_reads_outside_the_workers_are_under_the_alarm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inspect_file`` and ``inspect_bytes`` (repair's verify and peer reads) run in the caller's
    process, not in a worker: the alarm alone bounds them there, for a read busy in Python."""
    from cachedoctor.scan import inspect_bytes, inspect_file

    monkeypatch.setattr("cachedoctor.scan.worker.ALONE_TIMEOUT", 0.5)
    monkeypatch.setattr("cachedoctor.scan.worker.read_file", _busy)
    monkeypatch.setattr("cachedoctor.scan.worker.read_bytes", _busy)
    path = str(peers(tmp_path, n=1)[0])
    for judge in (lambda: inspect_file(path), lambda: inspect_bytes(path, Path(path).read_bytes())):
        started = time.monotonic()
        outcome = judge()
        assert time.monotonic() - started < STARVED * 0.5
        assert [(f.kind, f.details["seconds"]) for f in outcome.findings] == [("read-timeout", 0.5)]
