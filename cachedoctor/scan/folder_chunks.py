"""Which files of each folder the readers get, and in what chunks.

Split from ``engine.py``: the engine drives the walk and the pool; this decides per folder, with
the state database where there is one (``state/plan.py``), what must be read (deep or quick) and
what is taken from the record, and cuts the reads into chunks so that a folder's peer checks can
run as soon as its last chunk is back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from cachedoctor.scan.folders import Collector, Record
from cachedoctor.scan.state.plan import StateSet, plan_folder
from cachedoctor.scan.walk import Folder

if TYPE_CHECKING:
    from cachedoctor.scan.engine import ScanOptions
    from cachedoctor.scan.pool import Chunk


def folder_chunks(
    folders: Iterator[Folder],
    options: ScanOptions,
    collector: Collector,
    keep: Callable[[str], bool] | None,
    states: StateSet,
) -> Iterator[Chunk]:
    """Each folder's files to read, in chunks of ``options.chunk_size``: with a state database,
    its unchanged files are taken from the record (the whole folder, where its result is whole)
    and only the rest go out, each marked deep or not."""
    size = options.chunk_size
    facts = collector.matcher is not None
    for folder in folders:
        if folder.special:
            collector.skip_special(folder.special)
        files = collector.kept(folder.files, keep)
        if not files:
            collector.close_empty(folder.path)
            continue
        store = states.store_for(folder.path)
        if store is None:
            items = [(f, options.deep or options.sample is not None) for f in files]
            record, reused = None, []
        else:
            chosen = store.chosen(folder.path) if options.sample is not None else set()
            plan, result = plan_folder(
                store,
                folder.path,
                files,
                deep=options.deep,
                deep_changed=options.deep_changed,
                chosen=chosen,
                whole=collector.matcher is None,
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
                )
            items, reused = plan.to_read, plan.reused
            record = Record(store, plan.sigs, {p for p, d in items if d}, plan.gone, plan.digest, plan.recorded)
        collector.stats.files_deep += sum(1 for _, deep in items if deep)  # attempted: a torn file counts too
        n = (len(items) + size - 1) // size + (1 if reused else 0)
        folder_id = collector.open_folder(folder.path, n, record)
        if reused:
            collector.add(folder_id, reused, fresh=False)
        for i in range(0, len(items), size):
            yield folder_id, items[i : i + size], facts or store is not None, store is not None
