"""Which files of each folder the readers get, and in what parts.

Split from ``engine.py``: the engine drives the walk and the readers; this decides per folder,
with the state database where there is one (``state/plan.py``), what must be read (deep or
quick) and what is taken from the record, for every store alike: a local folder's files are
stat'ed when planned, a listed folder's facts come from its listing (``Folder.listed``). The
reads are then cut into parts (a chunk of files for a worker process, one object for a reading
thread) so that a folder's peer checks run as soon as its last part is back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from cachedoctor.scan.folders import Collector, Record
from cachedoctor.scan.state.plan import StateSet, plan_folder
from cachedoctor.scan.walk import Folder

if TYPE_CHECKING:
    from cachedoctor.scan.options import ScanOptions
    from cachedoctor.scan.pool import Chunk
    from cachedoctor.scan.targets import Target
    from cachedoctor.scan.thread_reads import Job

#: What one planned folder sends to the readers: its walk, its id in the collector, the files
#: to read (path, deep), whether outcomes must carry their facts, and whether to digest them.
Planned = tuple[Folder, int, list[tuple[str, bool]], bool, bool]


def planned_folders(
    folders: Iterator[Folder],
    options: ScanOptions,
    collector: Collector,
    keep: Callable[[str], bool] | None,
    states: StateSet,
    part_size: int,
) -> Iterator[Planned]:
    """Each folder's files to read: with a state database, its unchanged files are taken from
    the record (the whole folder, where its result is whole) and only the rest go out, each
    marked deep or not; without one, a deep scan takes the outcomes ``options.known`` holds
    (repair's rescan) and reads the rest. The folder is opened in the collector for its parts
    of ``part_size``."""
    facts = collector.matcher is not None
    for folder in folders:
        if folder.special:
            collector.skip_special(folder.special)
        files = collector.kept(folder.files, keep)
        if not files:
            collector.close_empty(folder.path)
            continue
        listed = None
        if folder.listed is not None:
            kept = set(files)
            listed = [info for info in folder.listed if info.url in kept]
        store = states.store_for(folder.path)
        if store is None:
            items = [(f, options.deep or options.sample is not None) for f in files]
            record, reused = None, []
            if options.known is not None and options.deep and options.sample is None:
                reused = [o for f in files if (o := options.known.take(f, facts)) is not None]
                if reused:
                    taken = {o.path for o in reused}
                    items = [item for item in items if item[0] not in taken]
        else:
            chosen = store.chosen(folder.path) if options.sample is not None else set()
            plan, result = plan_folder(
                store,
                folder.path,
                files,
                deep=options.deep,
                deep_changed=options.deep_changed,
                chosen=chosen,
                whole=not facts,
                listed=listed,
            )
            if result is not None:
                if collector.reuse_folder(folder.path, result):
                    continue
                plan, _ = plan_folder(
                    store,
                    folder.path,
                    files,
                    deep=options.deep,  # it did not decode
                    deep_changed=options.deep_changed,
                    chosen=chosen,
                    whole=False,
                    listed=listed,
                )
            items, reused = plan.to_read, plan.reused
            record = Record(store, plan.sigs, {p for p, d in items if d}, plan.gone, plan.digest, plan.recorded)
            record.remote = listed is not None  # a listing's versions are never racy
        collector.stats.files_deep += sum(1 for _, deep in items if deep)  # attempted: a torn file counts too
        n = (len(items) + part_size - 1) // part_size + (1 if reused else 0)
        folder_id = collector.open_folder(folder.path, n, record)
        if reused:
            collector.add(folder_id, reused, fresh=False)
        yield folder, folder_id, items, facts or store is not None, store is not None


def folder_chunks(
    folders: Iterator[Folder],
    options: ScanOptions,
    collector: Collector,
    keep: Callable[[str], bool] | None,
    states: StateSet,
) -> Iterator[Chunk]:
    """The worker processes' parts: each folder's files to read in chunks of ``options.chunk_size``."""
    size = options.chunk_size
    for _, folder_id, items, facts, digest in planned_folders(folders, options, collector, keep, states, size):
        for i in range(0, len(items), size):
            yield folder_id, items[i : i + size], facts, digest


def folder_jobs(
    folders: Iterator[Folder],
    targets: list[Target],
    options: ScanOptions,
    collector: Collector,
    keep: Callable[[str], bool] | None,
    states: StateSet,
) -> Iterator[Job]:
    """The reading threads' parts: one object each, with the facts its folder's listing gave
    and the store its target was resolved to (a dataset's config can name its own endpoint)."""
    from cachedoctor.scan.thread_reads import Job
    from cachedoctor.stores.interface import Location

    stores = {(t.location.scheme, t.location.bucket): t.store for t in targets}
    for folder, folder_id, items, facts, digest in planned_folders(folders, options, collector, keep, states, 1):
        listed = {info.url: info for info in folder.listed or ()}
        for path, deep in items:
            location = Location.parse(path)
            yield Job(folder_id, stores[location.scheme, location.bucket], listed[path], deep, facts, digest)
