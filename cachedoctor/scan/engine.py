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
from itertools import chain
from typing import TYPE_CHECKING

from cachedoctor.checks import RunView
from cachedoctor.errors import UsageError
from cachedoctor.layouts.interface import DatasetPlan
from cachedoctor.layouts.samplers.census import gather
from cachedoctor.progress import LIST, SCAN
from cachedoctor.scan.dataset import DatasetMatcher
from cachedoctor.scan.folder_chunks import folder_chunks, folder_jobs
from cachedoctor.scan.folders import Collector, ScanError
from cachedoctor.scan.merge import merge
from cachedoctor.scan.options import ScanOptions
from cachedoctor.scan.part import Part, PlanFacts, hostname
from cachedoctor.scan.result import ScanResult, judge_run
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
    from cachedoctor.sharding.interface import Shard
    from cachedoctor.stores.interface import ObjectInfo


#: ``--sample K%`` reads deep the K% of the whole cache due first, a ranking no shard can see.
SAMPLE_SPLIT = (
    "--sample chooses its share among the whole cache's files, which no shard sees; "
    "scan with --sample in one process, or split the scan without it"
)


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

    With ``options.shard`` it scans that shard's folders only; with ``options.ranks`` too (the
    ranks of one ``torchrun`` job), every rank gets every rank's part, and every rank returns
    the same result: the whole cache's, as one process would have found it.
    """
    options = options if options is not None else ScanOptions()
    started = time.perf_counter()
    ranks = options.ranks
    if ranks is None:
        parts = [scan_part(targets, options, progress, dataset, watch)]
    else:
        try:
            part = scan_part(targets, options, progress, dataset, watch)
        except Exception as exc:
            ranks.fail(exc)
        parts = [Part.unpacked(data) for data in ranks.share(part.packed())]
        ranks.seen = [p.line() for p in parts]  # what each rank did (``-v`` on rank 0, the benchmark)
    result = merge(parts, options, dataset)
    result.elapsed = time.perf_counter() - started
    return result


def scan_part(
    targets: list[str],
    options: ScanOptions,
    progress: Progress | None = None,
    dataset: DatasetPlan | None = None,
    watch: list[str] | None = None,
) -> Part:
    """This shard's part of the scan (``options.shard``; the whole cache without one), as
    :func:`scan` describes it, with the run as a whole left to the merge (``part.py``)."""
    from cachedoctor.sharding.interface import Shard

    started = time.perf_counter()
    if options.sample is not None and options.shard is not None and not options.shard.whole:
        raise UsageError(SAMPLE_SPLIT)
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
    shard = options.shard or Shard(0, 1)
    states = StateSet.open(roots, options.state, [t.url for t in remote if t.kind == PREFIX], shard=shard)
    try:
        part = _scan(roots, options, progress, dataset, states, watch or [], remote, shard)
    finally:
        states.close()
    for store in states.stores:
        if store.created and store.cache_files == 0:
            store.discard()  # no cache file under it: leave no .cachedoctor/ among someone's images
    part.notes[:0] = states.notes + alias_notes(merged)
    if options.inventory is not None:  # noted at the merge, with every shard's re-listed folders
        from cachedoctor.scan.inventory_relist import inventory_facts

        part.inventory = inventory_facts(remote)
    part.elapsed = time.perf_counter() - started
    stores = {id(t.store): t.store for t in remote}.values()
    part.requests = {"store": sum(int(getattr(store, "requests", 0)) for store in stores)} if remote else {}
    return part


def _scan(
    roots: list[str],
    options: ScanOptions,
    progress: Progress | None,
    dataset: DatasetPlan | None,
    states: StateSet,
    watch: list[str],
    remote: list[Target],
    shard: Shard,
) -> Part:
    keep = (lambda path: not dataset.is_source_name(path)) if dataset is not None and dataset.source_suffixes else None
    if options.sample is not None:
        for store in states.stores:
            choose(
                store,
                _owned(walk([r for r in roots if store.covers(r)], [], options.exclude), shard),
                options.sample,
                keep or (lambda path: True),
            )
    for store in states.stores:
        store.begin()
    walk_errors: list[WalkError] = []
    if dataset is not None and options.exclude:  # what the walk leaves out is not expected either
        drop_excluded(dataset, roots, options.exclude)
    buckets, run_notes = gather(dataset, options.world_size, options.batch_size)  # before the matcher consumes the plan
    matcher = DatasetMatcher(dataset, None if shard.whole else shard.owns) if dataset is not None else None
    count = _Count(progress, roots, options.exclude, states, shard) if progress is not None else None
    collector = Collector(count, matcher)
    if dataset is None and (options.world_size or options.batch_size):
        collector.shapes = Counter()  # no dataset: the run's buckets are the latent shapes read
    collector.watch(
        [os.path.abspath(w) for w in watch if not is_remote(w) and os.path.isdir(w)]
        + [t.url for t in remote if t.kind != OBJECT]
    )
    folders = _owned(walk(roots, walk_errors, options.exclude), shard)
    chunks = folder_chunks(count.listing(folders) if count is not None else folders, options, collector, keep, states)
    workers = options.workers or os.cpu_count() or 1
    first = next(chunks, None)  # None: every file was taken from the state database (a rescan)
    if first is None:
        pass  # nothing to read: no reader is imported and no worker started
    else:
        from cachedoctor.scan.pool import run_pool

        if any(deep for _, deep in first[1]):
            _deep_readers_before_fork()
        run_pool(chain([first], chunks), max(1, workers), collector, options.file_timeout, options.file_memory)
    if remote:
        listed: Iterator[Folder] = _owned(
            chain.from_iterable(listed_folders(t, options.exclude) for t in remote), shard
        )
        _read_on_threads(
            count.listing(listed) if count is not None else listed, remote, options, collector, states, keep
        )
    part = Part(shard, roots + [t.url for t in remote], world_size=options.world_size, batch_size=options.batch_size)
    if matcher is not None:
        collector.findings.extend(matcher.finish())
        part.stale, part.paired = matcher.mtime_stale, matcher.paired
    if collector.shapes is not None:  # judged at the merge, over every shard's shapes
        part.shapes, part.where = dict(collector.shapes), roots[0] if roots else ""
    else:  # from the dataset's plan alone: every shard judges the same
        part.run_findings = judge_run(RunView(dataset, options.world_size, options.batch_size, tuple(buckets)))
        part.run_notes = run_notes
    part.errors = [ScanError(e.path, e.message) for e in walk_errors if _owns_path(shard, e.path)] + collector.errors
    part.findings = collector.findings
    for path in chain((f.path for f in part.findings), (e.path for e in part.errors)):
        if not collector.unchecked:
            break
        collector.checked(path)
    stats = part.stats = collector.stats
    if progress is not None:
        progress(SCAN, stats.files_seen, stats.files_seen)
    part.special = collector.special
    for store in states.stores:
        store.finish(
            [r for r in roots if os.path.isdir(r) and store.covers(r)]
            + [t.url for t in remote if t.kind == PREFIX and store.covers(t.url)],
            options.deep,
            options.sample.text if options.sample else None,
            stats.files_seen,
            stats.files_seen - stats.files_reused,
            len(part.findings),
        )
    part.unchecked = sorted(collector.unchecked)
    part.dataset = PlanFacts.of(dataset) if dataset is not None else None
    part.host = hostname()
    return part


def _deep_readers_before_fork() -> None:
    """Deep reads need numpy and xxhash (``formats/_deep.py``): imported here, before the workers
    fork, they inherit them instead of each importing its own (0.1 s of CPU each), and the
    parent judges the folders' per-channel statistics (``checks/_peer_scores.py``) with numpy
    instead of plain Python, the same numbers several times faster (repair's own judgements of
    its rewrites, in this process, use them too). A quick scan never gets here with a deep item:
    it loads neither."""
    import numpy  # noqa: F401
    import xxhash  # noqa: F401


def _owned(folders: Iterator[Folder], shard: Shard) -> Iterator[Folder]:
    """The walk's folders that ``shard`` scans (all of them for a whole-cache scan)."""
    return folders if shard.whole else (f for f in folders if shard.owns(f.path))


def _owns_path(shard: Shard, path: str) -> bool:
    """Whether ``shard`` reports a walk problem at ``path``: a folder's is its owner's, a
    file's its folder's owner's (both claim an ambiguous one; the merge keeps it once)."""
    return shard.owns(path) or shard.owns(os.path.dirname(path.rstrip("/")))


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


class _Count:
    """The scan's progress: files judged so far, and the total as well as it is known.

    The total is the state database's record of the last scan when every root has one (a
    rescan pays one row for it), else a listing of the names first (a first scan: no file is
    opened or stat'ed twice, and only a caller that shows progress pays for it). Once the walk
    that feeds the readers has listed everything, its own count replaces the estimate.
    """

    def __init__(
        self, progress: Progress, roots: list[str], exclude: tuple[str, ...], states: StateSet, shard: Shard
    ) -> None:
        self.progress = progress
        self.listed = 0
        self.walked = False
        self.estimate = states.recorded_files(roots)
        if self.estimate is None:
            self.estimate = 0
            for folder in _owned(walk(roots, [], exclude), shard):
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
