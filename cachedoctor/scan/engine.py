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
from cachedoctor.scan.codec import outcome_to_text
from cachedoctor.scan.dataset import DatasetMatcher
from cachedoctor.scan.incremental import StateSet, decode_result, folder_result, plan_folder
from cachedoctor.scan.inspect import Outcome, inspect_chunk
from cachedoctor.scan.sample import Sample, choose
from cachedoctor.scan.state import Sig, StateStore, Upsert
from cachedoctor.scan.walk import Folder, WalkError, check_targets, walk

Progress = Callable[[int, int], None]  # (files done, bytes done)


@dataclass(frozen=True, slots=True)
class ScanOptions:
    deep: bool = False
    workers: int | None = None  # None: one per CPU
    chunk_size: int = 64
    exclude: tuple[str, ...] = ()  # globs on paths relative to each target, and on base names
    #: The state database: ``None`` (read everything, record nothing), ``"auto"``
    #: (``<target>/.cachedoctor/state.sqlite`` per folder target), ``"existing"`` (only where one
    #: is already there), or a path (one database for every target).
    state: str | None = None
    sample: Sample | None = None  # deep-read this share, chosen through the state (implies deep reads)
    deep_changed: bool = False  # read deep whatever changed since the state's record (recover)

    @property
    def mode(self) -> str:
        if self.sample is not None:
            return f"deep sample {self.sample.text}"
        return "deep" if self.deep else "quick"


@dataclass(slots=True)
class ScanStats:
    files_seen: int = 0
    files_read: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    folders: int = 0
    formats: Counter = field(default_factory=Counter)
    files_reused: int = 0  # unchanged since the state's record: not read again
    files_deep: int = 0  # read deep (or tried to: a torn file counts) by this scan


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
    notes: list[str] = field(default_factory=list)  # about the scan itself (the state database)


class _FolderState:
    __slots__ = ("path", "pending", "groups", "found", "findings", "record")

    def __init__(self, path: str, pending: int, record: "_Record | None" = None) -> None:
        self.path = path
        self.pending = pending
        self.groups: dict[str, list[PeerEntry]] = defaultdict(list)
        self.found: dict[str, Found] = {}
        self.findings: list[Finding] = []  # dataset scans: held until the folder's sources are known
        self.record = record


class _Record:
    """What the state database gets for a folder once its last chunk is in."""

    __slots__ = ("store", "sigs", "deep", "gone", "digest", "fresh", "read", "skipped", "bytes", "formats", "settled")

    def __init__(self, store: StateStore, sigs: dict[str, Sig], deep: set[str], gone: list[str],
                 digest: str | None) -> None:
        self.store, self.sigs, self.deep, self.gone, self.digest = store, sigs, deep, gone, digest
        self.fresh: list[Upsert] = []
        self.read = self.skipped = self.bytes = 0
        self.formats: Counter = Counter()
        self.settled = digest is not None


def scan(targets: list[str], options: ScanOptions = ScanOptions(), progress: Progress | None = None,
         dataset: DatasetPlan | None = None) -> ScanResult:
    """Scan ``targets`` (files or folders). Raises ``TargetError`` if one cannot be scanned.

    With a ``dataset`` plan the scan also pairs each cache folder's files with the entries the
    dataset expects there, and skips the dataset's own files (images, captions) unread. With
    ``options.state`` it reads only what changed since the state database's record.
    """
    started = time.perf_counter()
    roots = check_targets(targets)
    states = StateSet.open(roots, options.state)
    try:
        result = _scan(roots, options, progress, dataset, states)
    finally:
        states.close()
    result.notes[:0] = states.notes
    result.elapsed = time.perf_counter() - started
    return result


def _scan(roots: list[str], options: ScanOptions, progress: Progress | None, dataset: DatasetPlan | None,
          states: StateSet) -> ScanResult:
    keep = (lambda path: not dataset.is_source_name(path)) if dataset is not None and dataset.source_suffixes else None
    if options.sample is not None:
        for store in states.stores:
            choose(store, walk([r for r in roots if store.covers(r)], [], options.exclude), options.sample,
                   keep or (lambda path: True))
    for store in states.stores:
        store.begin()
    walk_errors: list[WalkError] = []
    matcher = DatasetMatcher(dataset) if dataset is not None else None
    collector = _Collector(progress, matcher)
    chunks = _chunks(walk(roots, walk_errors, options.exclude), options, collector, keep, states)
    workers = options.workers or os.cpu_count() or 1
    if workers <= 1:
        for folder_id, items, facts, digest in chunks:
            collector.add(folder_id, inspect_chunk(items, facts, digest))
    else:
        _run_pool(chunks, workers, collector)
    if matcher is not None:
        collector.findings.extend(matcher.finish())
    errors = [ScanError(e.path, e.message) for e in walk_errors] + collector.errors
    findings = sorted(collector.findings, key=Finding.sort_key)
    stats = collector.stats
    for store in states.stores:
        store.finish([r for r in roots if os.path.isdir(r) and store.covers(r)], options.deep,
                     options.sample.text if options.sample else None, stats.files_seen,
                     stats.files_seen - stats.files_reused, len(findings))
    return ScanResult(roots, options, findings, stats, errors, 0.0, dataset)


Chunk = tuple[int, list[tuple[str, bool]], bool, bool]  # folder id, (path, deep) items, facts, digest


def _chunks(folders: Iterator[Folder], options: ScanOptions, collector: "_Collector",
            keep: Callable[[str], bool] | None, states: StateSet) -> Iterator[Chunk]:
    size = options.chunk_size
    facts = collector.matcher is not None
    for folder in folders:
        files = folder.files
        if keep is not None:
            files = [f for f in files if keep(f)]
            collector.stats.files_seen += len(folder.files) - len(files)
            collector.stats.files_skipped += len(folder.files) - len(files)
        if not files:
            collector.close_empty(folder.path)
            continue
        store = states.store_for(folder.path)
        if store is None:
            items = [(f, options.deep or options.sample is not None) for f in files]
            record, reused = None, []
        else:
            chosen = store.chosen(folder.path) if options.sample is not None else set()
            how = dict(deep=options.deep, deep_changed=options.deep_changed, chosen=chosen)
            plan, result = plan_folder(store, folder.path, files, whole=collector.matcher is None, **how)
            if result is not None:
                if collector.reuse_folder(folder.path, result):
                    continue
                plan, _ = plan_folder(store, folder.path, files, whole=False, **how)  # it did not decode
            items, reused = plan.to_read, plan.reused
            record = _Record(store, plan.sigs, {p for p, d in items if d}, plan.gone, plan.digest)
        collector.stats.files_deep += sum(1 for _, deep in items if deep)  # attempted: a torn file counts too
        n = (len(items) + size - 1) // size + (1 if reused else 0)
        folder_id = collector.open_folder(folder.path, n, record)
        if reused:
            collector.add(folder_id, reused, fresh=False)
        for i in range(0, len(items), size):
            yield folder_id, items[i:i + size], facts or store is not None, store is not None


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _run_pool(chunks: Iterator[Chunk], workers: int, collector: "_Collector") -> None:
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_ignore_sigint)
    in_flight: dict[Future, int] = {}
    limit = workers * 4
    try:
        for folder_id, items, facts, digest in chunks:
            if len(in_flight) >= limit:
                _drain(in_flight, collector, FIRST_COMPLETED)
            in_flight[pool.submit(inspect_chunk, items, facts, digest)] = folder_id
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

    def open_folder(self, path: str, chunks: int, record: _Record | None = None) -> int:
        self._next_id += 1
        self.folders[self._next_id] = _FolderState(path, chunks, record)
        self.stats.folders += 1
        return self._next_id

    def reuse_folder(self, path: str, text: str) -> bool:
        """Take an unchanged folder's recorded result (a cache-only scan); ``False`` if it does not decode."""
        result = decode_result(text, path)
        if result is None:
            return False
        stats = self.stats
        stats.folders += 1
        stats.files_seen += result.read + result.skipped
        stats.files_read += result.read
        stats.files_reused += result.read + result.skipped
        stats.files_skipped += result.skipped
        stats.bytes_read += result.bytes
        stats.formats.update(result.formats)
        self.findings.extend(result.findings)
        if self.progress is not None:
            self.progress(stats.files_seen, stats.bytes_read)
        return True

    def add(self, folder_id: int, outcomes: list[Outcome], fresh: bool = True) -> None:
        state = self.folders[folder_id]
        stats = self.stats
        matcher = self.matcher
        record = state.record
        for o in outcomes:
            stats.files_seen += 1
            if matcher is not None:
                state.found[o.path] = Found(o.path, o.mtime_ns, o.shapes, o.values)
            if record is not None:
                self._remember(record, o, fresh)
            if not fresh:
                stats.files_reused += 1
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
            (state.findings if matcher is not None or record is not None else self.findings).extend(o.findings)
            if o.group is not None and o.peer is not None:
                state.groups[o.group].append(o.peer)
        state.pending -= 1
        if state.pending == 0:
            self._close(self.folders.pop(folder_id))
        if self.progress is not None:
            self.progress(stats.files_seen, stats.bytes_read)

    @staticmethod
    def _remember(record: _Record, o: Outcome, fresh: bool) -> None:
        if o.status == "error":
            record.settled = False
            return
        if o.status == "skipped":
            record.skipped += 1
        else:
            record.read += 1
            record.bytes += o.size
            if o.format:
                record.formats[o.format] += 1
        sig = record.sigs.get(o.path)
        if fresh and sig is not None:
            deep_scan = record.store.scan_id if o.path in record.deep else None
            record.fresh.append(Upsert(os.path.basename(o.path), sig, record.store.is_racy(sig), deep_scan, o.xxh3,
                                       outcome_to_text(o)))

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
        record = state.record
        if record is not None:
            result = None
            if record.settled:
                result = folder_result(record.read, record.skipped, record.bytes, record.formats, found, state.path)
            record.store.save(state.path, record.fresh, record.gone, record.digest if record.settled else None, result)
        if self.matcher is not None:
            found = self.matcher.close_folder(state.path, state.found, found)
        self.findings.extend(found)
