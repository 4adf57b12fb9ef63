"""The remote part of a scan: remote targets' folders planned against the state database and
read on threads, their outcomes going to the same :class:`~cachedoctor.scan.folders.Collector`
as local files' (so peer checks, findings, statistics and the state's records are the local
ones). ``engine.py`` calls :func:`open_remote` before the scan (a missing bucket or refused
credentials stop it there, one line) and :func:`scan_remote` after the local folders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import chain
from typing import TYPE_CHECKING

from cachedoctor.scan.folders import Collector, Record
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.remote_read import Job, jobs_for, read_all
from cachedoctor.scan.remote_state import plan_remote_folder, remote_sig
from cachedoctor.scan.remote_walk import RemoteTarget, remote_folders, resolve_target
from cachedoctor.scan.walk import Folder
from cachedoctor.stores.interface import Location, ObjectInfo, Store

if TYPE_CHECKING:
    from cachedoctor.scan.engine import ScanOptions
    from cachedoctor.scan.state.plan import StateSet
    from cachedoctor.stores.s3 import S3Settings


def open_remote(
    urls: list[str], s3: S3Settings | None, known: Mapping[str, S3Settings] | None = None
) -> list[RemoteTarget]:
    """Each remote target resolved by its first LIST request (see ``remote_walk.py``), reached
    with the settings a dataset's config gives for it (``known``: its endpoint and keys), else
    with ``s3`` (the command line, settings file, or the standard AWS chain)."""
    from cachedoctor.stores.connect import store_for
    from cachedoctor.stores.interface import RemoteError, TransientError

    known = known or {}
    targets = []
    for url in urls:
        try:
            targets.append(resolve_target(url, store_for(url, known.get(url, s3))))
        except TransientError as exc:  # a HEAD of a target that names one object, still failing
            raise RemoteError(url, f"cannot be read ({str(exc).removeprefix(url + ': ')}); try again later") from None
    return targets


def scan_remote(
    targets: list[RemoteTarget],
    options: ScanOptions,
    collector: Collector,
    states: StateSet,
    keep: Callable[[str], bool] | None,
    listing: Callable[[Iterator[Folder]], Iterator[Folder]] | None = None,
) -> None:
    """Walk, plan and read every remote target into ``collector``."""
    infos: dict[str, ObjectInfo] = {}
    stores = {t.location.bucket: t.store for t in targets}
    folders: Iterator[Folder] = chain.from_iterable(remote_folders(t, options.exclude, infos) for t in targets)
    if listing is not None:
        folders = listing(folders)
    jobs = _jobs(folders, infos, stores, options, collector, keep, states)

    def done(job: Job, outcome: Outcome, info: ObjectInfo) -> None:
        state = collector.folders.get(job.folder_id)
        if info != job.info and state is not None and state.record is not None:
            state.record.sigs[info.url] = remote_sig(info)  # read as a fresh HEAD found it
        collector.add(job.folder_id, [outcome])

    read_all(jobs, jobs_for(options.workers), options.file_timeout, done)


def _jobs(
    folders: Iterator[Folder],
    infos: dict[str, ObjectInfo],
    stores: dict[str, Store],
    options: ScanOptions,
    collector: Collector,
    keep: Callable[[str], bool] | None,
    states: StateSet,
) -> Iterator[Job]:
    """``folder_chunks.folder_chunks`` for remote folders: one job per object to read."""
    facts = collector.matcher is not None
    for folder in folders:
        files = collector.kept(folder.files, keep)
        if not files:
            collector.close_empty(folder.path)
            continue
        listed = [infos.pop(f) for f in folder.files]
        if keep is not None:
            kept = set(files)
            listed = [i for i in listed if i.url in kept]
        store = states.store_for(folder.path)
        record = None
        reused: list[Outcome] = []
        if store is None:
            items = [(f, options.deep) for f in files]
        else:
            plan, result = plan_remote_folder(
                store, folder.path, listed, deep=options.deep, deep_changed=options.deep_changed, whole=not facts
            )
            if result is not None:
                if collector.reuse_folder(folder.path, result):
                    continue
                plan, _ = plan_remote_folder(
                    store, folder.path, listed, deep=options.deep, deep_changed=options.deep_changed, whole=False
                )
            items, reused = plan.to_read, plan.reused
            record = Record(store, plan.sigs, {p for p, d in items if d}, plan.gone, plan.digest, plan.recorded)
            record.remote = True
        collector.stats.files_deep += sum(1 for _, deep in items if deep)
        folder_id = collector.open_folder(folder.path, len(items) + (1 if reused else 0), record)
        if reused:
            collector.add(folder_id, reused, fresh=False)
        by_url = {i.url: i for i in listed}
        bucket_store = stores[Location.parse(folder.path).bucket]
        for path, deep in items:
            yield Job(folder_id, bucket_store, by_url[path], deep, facts or store is not None, store is not None)


__all__ = ["open_remote", "scan_remote"]
