"""Drive a scan: walk folders, decide per folder what must be read, read it on N worker processes.

Work goes out in chunks of a folder's files with a bounded number in flight, and a folder's
peer checks run (in ``folders.py``) as soon as its last chunk is back, so memory stays flat
however large the cache. With a state database, a folder's unchanged files are taken from it
(``state/plan.py``, ``folder_chunks.py``) and only the rest go to the workers. ``workers=1`` is one worker process
too: no file is read by the process that must survive it (``pool.py``), whatever the mode.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

from cachedoctor.checks import RUN_CHECKS, RunView
from cachedoctor.errors import UsageError
from cachedoctor.findings import Finding
from cachedoctor.layouts.interface import DatasetPlan
from cachedoctor.layouts.samplers.census import from_shapes, gather
from cachedoctor.progress import LIST, SCAN
from cachedoctor.scan.dataset import DatasetMatcher
from cachedoctor.scan.folder_chunks import folder_chunks, folder_jobs
from cachedoctor.scan.folders import Collector, ScanError, ScanStats
from cachedoctor.scan.options import ScanOptions
from cachedoctor.scan.state.plan import StateSet
from cachedoctor.scan.state.sample import choose
from cachedoctor.scan.targets import OBJECT, PREFIX
from cachedoctor.scan.walk import (
    Folder,
    WalkError,
    alias_notes,
    check_targets,
    drop_excluded,
    listed_folders,
    merge_aliases,
    walk,
)
from cachedoctor.stores.interface import is_remote

if TYPE_CHECKING:
    from cachedoctor.progress import Progress
    from cachedoctor.scan.outcome import Outcome
    from cachedoctor.scan.targets import Target
    from cachedoctor.scan.thread_reads import Job
    from cachedoctor.stores.interface import ObjectInfo


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
    #: Of the folders the caller asked to ``watch``, those that held nothing to check (no cache
    #: file judged, no finding, nothing unreadable): one empty target among others must not pass
    #: a gate either (a second cache on a disk that is not mounted).
    unchecked: list[str] = field(default_factory=list)
    special: str | None = None  # the note on FIFOs, sockets and devices skipped unopened (also in ``notes``)

    @property
    def empty(self) -> bool:
        """Nothing to check: no file was judged as a cache file (every file under a cache name
        is, and any other whose bytes are a cache format) and the dataset expected no entry
        (one it expected and did not find is a finding), with nothing unreadable. A CI gate
        pointed at such targets (an unmounted disk, a mistyped folder, one of images only) must
        not pass: see ``ScanReport.exit_code`` and ``allow_empty``."""
        return self.stats.files_read == 0 and not self.findings and not self.errors


def scan(
    targets: list[str],
    options: ScanOptions | None = None,
    progress: Progress | None = None,
    dataset: DatasetPlan | None = None,
    watch: list[str] | None = None,
) -> ScanResult:
    """Scan ``targets`` (files or folders). Raises ``TargetError`` if one cannot be scanned.

    With a ``dataset`` plan the scan also pairs each cache folder's files with the entries the
    dataset expects there, and skips the dataset's own files (images, captions) unread. With
    ``options.state`` it reads only what changed since the state database's record.
    ``progress`` gets ``("scan", files judged, total)`` calls (see :mod:`cachedoctor.progress`).
    ``watch``: folders (the ones the user named) to report in ``unchecked`` if nothing under
    them was checked.
    """
    options = options if options is not None else ScanOptions()
    started = time.perf_counter()
    roots, merged = merge_aliases(check_targets([t for t in targets if not is_remote(t)]))
    if merged:  # a merged target is watched under the name its files are scanned by
        watch = [w if is_remote(w) else merged.get(os.path.abspath(w), w) for w in watch or []]
    remote: list[Target] = []
    if any(is_remote(t) for t in targets):
        if options.sample is not None:
            raise UsageError("--sample does not take s3:// targets yet; scan them with --deep, or without --sample")
        from cachedoctor.scan.targets import open_targets

        known = dataset.remote_settings if dataset is not None else {}
        remote = open_targets([t for t in targets if is_remote(t)], options.s3, known, options.inventory)
    states = StateSet.open(roots, options.state, [t.url for t in remote if t.kind == PREFIX])
    try:
        result = _scan(roots, options, progress, dataset, states, watch or [], remote)
    finally:
        states.close()
    for store in states.stores:
        if store.created and store.cache_files == 0:
            store.discard()  # no cache file under it: leave no .cachedoctor/ among someone's images
    result.notes[:0] = states.notes + alias_notes(merged)
    if options.inventory is not None:
        from cachedoctor.scan.inventory_relist import inventory_notes

        result.notes += inventory_notes(remote)
    result.elapsed = time.perf_counter() - started
    return result


def _scan(
    roots: list[str],
    options: ScanOptions,
    progress: Progress | None,
    dataset: DatasetPlan | None,
    states: StateSet,
    watch: list[str],
    remote: list[Target],
) -> ScanResult:
    keep = (lambda path: not dataset.is_source_name(path)) if dataset is not None and dataset.source_suffixes else None
    if options.sample is not None:
        for store in states.stores:
            choose(
                store,
                walk([r for r in roots if store.covers(r)], [], options.exclude),
                options.sample,
                keep or (lambda path: True),
            )
    for store in states.stores:
        store.begin()
    walk_errors: list[WalkError] = []
    if dataset is not None and options.exclude:  # what the walk leaves out is not expected either
        drop_excluded(dataset, roots, options.exclude)
    buckets, run_notes = gather(dataset, options.world_size, options.batch_size)  # before the matcher consumes the plan
    matcher = DatasetMatcher(dataset) if dataset is not None else None
    count = _Count(progress, roots, options.exclude, states) if progress is not None else None
    collector = Collector(count, matcher)
    if dataset is None and (options.world_size or options.batch_size):
        collector.shapes = Counter()  # no dataset: the run's buckets are the latent shapes read
    collector.watch(
        [os.path.abspath(w) for w in watch if not is_remote(w) and os.path.isdir(w)]
        + [t.url for t in remote if t.kind != OBJECT]
    )
    folders = walk(roots, walk_errors, options.exclude)
    chunks = folder_chunks(count.listing(folders) if count is not None else folders, options, collector, keep, states)
    workers = options.workers or os.cpu_count() or 1
    first = next(chunks, None)  # None: every file was taken from the state database (a rescan)
    if first is None:
        pass  # nothing to read: no reader is imported and no worker started
    else:
        from cachedoctor.scan.pool import run_pool

        run_pool(chain([first], chunks), max(1, workers), collector, options.file_timeout, options.file_memory)
    if remote:
        listed: Iterator[Folder] = chain.from_iterable(listed_folders(t, options.exclude) for t in remote)
        _read_on_threads(
            count.listing(listed) if count is not None else listed, remote, options, collector, states, keep
        )
    if matcher is not None:
        collector.findings.extend(matcher.finish())
    if collector.shapes is not None:
        buckets, run_notes = from_shapes(collector.shapes, roots[0], options.world_size, options.batch_size)
    collector.findings.extend(judge_run(RunView(dataset, options.world_size, options.batch_size, tuple(buckets))))
    errors = [ScanError(e.path, e.message) for e in walk_errors] + collector.errors
    findings = sorted(collector.findings, key=Finding.sort_key)
    for path in chain((f.path for f in findings), (e.path for e in errors)):
        if not collector.unchecked:
            break
        collector.checked(path)
    stats = collector.stats
    if progress is not None:
        progress(SCAN, stats.files_seen, stats.files_seen)
    special = special_note(collector.special) if collector.special else None
    notes = ([special] if special else []) + run_notes
    for store in states.stores:
        store.finish(
            [r for r in roots if os.path.isdir(r) and store.covers(r)]
            + [t.url for t in remote if t.kind == PREFIX and store.covers(t.url)],
            options.deep,
            options.sample.text if options.sample else None,
            stats.files_seen,
            stats.files_seen - stats.files_reused,
            len(findings),
        )
    unchecked = sorted(collector.unchecked)
    targets = roots + [t.url for t in remote]
    return ScanResult(targets, options, findings, stats, errors, 0.0, dataset, notes, unchecked, special)


def _read_on_threads(
    folders: Iterator[Folder],
    targets: list[Target],
    options: ScanOptions,
    collector: Collector,
    states: StateSet,
    keep: Callable[[str], bool] | None,
) -> None:
    """Read the folders of stores whose objects no worker process can open on threads
    (``thread_reads.py``); outcomes go to the same collector as the workers'."""
    from cachedoctor.scan.state.store import sig_of_info
    from cachedoctor.scan.thread_reads import Done, jobs_for, read_all

    def done(job: Job, outcome: Outcome, info: ObjectInfo) -> None:
        state = collector.folders.get(job.folder_id)
        if info != job.info and state is not None and state.record is not None:
            state.record.sigs[info.url] = sig_of_info(info)  # read as a fresh HEAD found it
        collector.add(job.folder_id, [outcome])

    finish: Done = done
    if any(t.inventory is not None for t in targets):  # listed by an inventory: what changed since is re-listed
        from cachedoctor.scan.inventory_relist import Relister

        relister = Relister(targets, options, collector, keep, done)
        folders, finish = relister.folders(folders), relister.done
        jobs = relister.jobs(folder_jobs(folders, targets, options, collector, keep, states))
    else:
        jobs = folder_jobs(folders, targets, options, collector, keep, states)
    read_all(jobs, jobs_for(options.workers), options.file_timeout, finish)


def judge_run(run: RunView) -> list[Finding]:
    """The rules about the training run as a whole (``Check.check_run``), once every folder is in."""
    return [finding for check in RUN_CHECKS for finding in check.check_run(run)]


def special_note(entries: list[tuple[str, str]], shown: int = 5) -> str:
    """``skipped 1 special file (FIFO): /x/pipe.pt``: FIFOs, sockets and devices named like
    cache files, which the scan never opens (a FIFO would block it, a device has side effects)."""
    entries = sorted(entries)
    kinds = ", ".join(sorted({kind for _, kind in entries}))
    paths = ", ".join(path for path, _ in entries[:shown])
    more = f" and {len(entries) - shown} more" if len(entries) > shown else ""
    n = len(entries)
    return f"skipped {n} special file{'s' if n != 1 else ''} ({kinds}): {paths}{more}"


class _Count:
    """The scan's progress: files judged so far, and the total as well as it is known.

    The total is the state database's record of the last scan when every root has one (a
    rescan pays one row for it), else a listing of the names first (a first scan: no file is
    opened or stat'ed twice, and only a caller that shows progress pays for it). Once the walk
    that feeds the readers has listed everything, its own count replaces the estimate.
    """

    def __init__(self, progress: Progress, roots: list[str], exclude: tuple[str, ...], states: StateSet) -> None:
        self.progress = progress
        self.listed = 0
        self.walked = False
        self.estimate = states.recorded_files(roots)
        if self.estimate is None:
            self.estimate = 0
            for folder in walk(roots, [], exclude):
                self.estimate += len(folder.files)
                progress(LIST, self.estimate, None)
        progress(SCAN, 0, self.estimate)

    def listing(self, folders: Iterator[Folder]) -> Iterator[Folder]:
        for folder in folders:
            self.listed += len(folder.files)
            yield folder
        self.walked = True

    def __call__(self, files: int, _bytes: int) -> None:
        total: int | None = self.listed if self.walked else self.estimate
        if total is not None and total < max(files, self.listed):
            total = None  # the cache grew since the record: unknown until the walk ends
        self.progress(SCAN, files, total)
