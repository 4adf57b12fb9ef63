"""Drive a scan: walk folders, read files on N worker processes, run peer checks per folder.

Work goes out in chunks of a folder's files with a bounded number in flight, and a folder's
peer checks run as soon as its last chunk is back, so memory stays flat however large the
cache. ``workers=1`` runs in-process (no pool start-up, easy to profile).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Iterator

from cachedoctor.checks import PEER_CHECKS, Found, PeerEntry, PeerGroup
from cachedoctor.findings import Finding
from cachedoctor.layouts.interface import DatasetPlan
from cachedoctor.scan.dataset import DatasetMatcher
from cachedoctor.scan.inspect import Outcome, inspect_chunk
from cachedoctor.scan.walk import Folder, WalkError, check_targets, walk

Progress = Callable[[int, int], None]  # (files done, bytes done)


@dataclass(frozen=True, slots=True)
class ScanOptions:
    deep: bool = False
    workers: int | None = None  # None: one per CPU
    chunk_size: int = 64
    exclude: tuple[str, ...] = ()  # globs on paths relative to each target, and on base names


@dataclass(slots=True)
class ScanStats:
    files_seen: int = 0
    files_read: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    folders: int = 0
    formats: Counter = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class ScanError:
    path: str
    message: str


@dataclass(slots=True)
class ScanResult:
    targets: list[str]
    options: ScanOptions
    findings: list[Finding]
    stats: ScanStats
    errors: list[ScanError]
    elapsed: float
    dataset: DatasetPlan | None = None


class _FolderState:
    __slots__ = ("path", "pending", "groups", "found", "findings")

    def __init__(self, path: str, pending: int) -> None:
        self.path = path
        self.pending = pending
        self.groups: dict[str, list[PeerEntry]] = defaultdict(list)
        self.found: dict[str, Found] = {}
        self.findings: list[Finding] = []  # dataset scans: held until the folder's sources are known


def scan(targets: list[str], options: ScanOptions = ScanOptions(), progress: Progress | None = None,
         dataset: DatasetPlan | None = None) -> ScanResult:
    """Scan ``targets`` (files or folders). Raises ``TargetError`` if one cannot be scanned.

    With a ``dataset`` plan the scan also pairs each cache folder's files with the entries the
    dataset expects there, and skips the dataset's own files (images, captions) unread.
    """
    started = time.perf_counter()
    roots = check_targets(targets)
    walk_errors: list[WalkError] = []
    matcher = DatasetMatcher(dataset) if dataset is not None else None
    collector = _Collector(progress, matcher)
    chunks = _chunks(walk(roots, walk_errors, options.exclude), options.chunk_size, collector, dataset)
    workers = options.workers or os.cpu_count() or 1
    with_facts = matcher is not None
    if workers <= 1:
        for folder_id, paths in chunks:
            collector.add(folder_id, inspect_chunk(paths, options.deep, with_facts))
    else:
        _run_pool(chunks, workers, options.deep, with_facts, collector)
    if matcher is not None:
        collector.findings.extend(matcher.finish())
    errors = [ScanError(e.path, e.message) for e in walk_errors] + collector.errors
    findings = sorted(collector.findings, key=Finding.sort_key)
    return ScanResult(roots, options, findings, collector.stats, errors, time.perf_counter() - started, dataset)


def _chunks(folders: Iterator[Folder], size: int, collector: "_Collector",
            dataset: DatasetPlan | None) -> Iterator[tuple[int, list[str]]]:
    for folder in folders:
        files = folder.files
        if dataset is not None and dataset.source_suffixes:
            files = [f for f in files if not dataset.is_source_name(f)]
            collector.stats.files_seen += len(folder.files) - len(files)
            collector.stats.files_skipped += len(folder.files) - len(files)
        if not files:
            collector.close_empty(folder.path)
            continue
        n = (len(files) + size - 1) // size
        folder_id = collector.open_folder(folder.path, n)
        for i in range(0, len(files), size):
            yield folder_id, files[i:i + size]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _run_pool(chunks: Iterator[tuple[int, list[str]]], workers: int, deep: bool, with_facts: bool,
              collector: "_Collector") -> None:
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_ignore_sigint)
    in_flight: dict[Future, int] = {}
    limit = workers * 4
    try:
        for folder_id, paths in chunks:
            if len(in_flight) >= limit:
                _drain(in_flight, collector, FIRST_COMPLETED)
            in_flight[pool.submit(inspect_chunk, paths, deep, with_facts)] = folder_id
        while in_flight:
            _drain(in_flight, collector, FIRST_COMPLETED)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _drain(in_flight: dict[Future, int], collector: "_Collector", when: str) -> None:
    done, _ = wait(in_flight, return_when=when)
    for future in done:
        collector.add(in_flight.pop(future), future.result())


class _Collector:
    """Gathers outcomes in the parent; runs a folder's peer checks when its last chunk is in."""

    def __init__(self, progress: Progress | None, matcher: DatasetMatcher | None = None) -> None:
        self.progress = progress
        self.matcher = matcher
        self.stats = ScanStats()
        self.findings: list[Finding] = []
        self.errors: list[ScanError] = []
        self.folders: dict[int, _FolderState] = {}
        self._next_id = 0

    def open_folder(self, path: str, chunks: int) -> int:
        self._next_id += 1
        self.folders[self._next_id] = _FolderState(path, chunks)
        self.stats.folders += 1
        return self._next_id

    def add(self, folder_id: int, outcomes: list[Outcome]) -> None:
        state = self.folders[folder_id]
        stats = self.stats
        matcher = self.matcher
        for o in outcomes:
            stats.files_seen += 1
            if matcher is not None:
                state.found[o.path] = Found(o.path, o.mtime_ns, o.shapes, o.values)
            if o.status == "error":
                self.errors.append(ScanError(o.path, o.error or "unreadable"))
                continue
            if o.status == "skipped":
                stats.files_skipped += 1
                continue
            stats.files_read += 1
            stats.bytes_read += o.size
            if o.format:
                stats.formats[o.format] += 1
            (state.findings if matcher is not None else self.findings).extend(o.findings)
            if o.group is not None and o.peer is not None:
                state.groups[o.group].append(o.peer)
        state.pending -= 1
        if state.pending == 0:
            self._close(self.folders.pop(folder_id))
        if self.progress is not None:
            self.progress(stats.files_seen, stats.bytes_read)

    def close_empty(self, path: str) -> None:
        """A folder with no cache files at all: every entry expected in it is missing."""
        if self.matcher is not None:
            self.matcher.close_folder(path, {}, [])

    def _close(self, state: _FolderState) -> None:
        found = state.findings
        for entries in state.groups.values():
            if len(entries) < 2:
                continue
            group = PeerGroup(state.path, tuple(entries))
            for check in PEER_CHECKS:
                found.extend(check.check_peers(group))
        if self.matcher is not None:
            found = self.matcher.close_folder(state.path, state.found, found)
        self.findings.extend(found)
