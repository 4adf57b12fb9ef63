"""What changed since the inventory, found by the reads, and the folders it changed listed again.

An inventory is a day or a week old. Every read of an object is conditional on the ETag the
inventory gave (``thread_reads.read_object``): an object rewritten since is read as it is now
(a fresh HEAD), one deleted since is gone. Either means its folder changed since the
inventory, and may hold keys the inventory never saw: once the folder's last read is back,
the folder is listed again (one LIST with its prefix and a ``/`` delimiter, its subfolders
left out: ``Store.list_folder``), and it is scanned as that listing has it: what is no longer
there is dropped (not reported), keys new to it are read, then its peer checks run. Folders
whose reads all found the inventory's version are never listed.

The cost: reads whose folder nothing changed pass straight to the collector; a moved read is
held back until its folder is re-listed. Objects judged without a request (empty ones and a
writer's temp names) are HEADed first, since nothing else would notice they changed.

What it cannot see: a key added to a folder where nothing else changed, or a new folder, until
the next inventory (scan without ``--inventory`` to list everything); with a state database,
an object it takes as unchanged is not read, so its change since the inventory is not seen
either. The scan's notes say where the listing came from (:func:`inventory_notes`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from cachedoctor.checks import is_temp_name
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.state.store import sig_of_info
from cachedoctor.scan.thread_reads import Job
from cachedoctor.scan.walk import _left_out
from cachedoctor.stores.interface import Location, ObjectChanged, ObjectGone, ObjectInfo, Store, TransientError

if TYPE_CHECKING:
    from cachedoctor.scan.folders import Collector
    from cachedoctor.scan.options import ScanOptions
    from cachedoctor.scan.targets import Target
    from cachedoctor.scan.walk import Folder

Done = Callable[[Job, Outcome, ObjectInfo], None]


class _Noticing:
    """One job's store: whether a read found the object gone or another version (``moved``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.moved = False

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        try:
            return self.store.read_range(info, start, end)
        except (ObjectGone, ObjectChanged):
            self.moved = True
            raise

    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        try:
            return self.store.read_whole(info, limit)
        except (ObjectGone, ObjectChanged):
            self.moved = True
            raise

    def head(self, url: str) -> ObjectInfo | None:
        return self.store.head(url)

    def cancel_all(self) -> None:
        self.store.cancel_all()


@dataclass(slots=True)
class _Watch:
    """One folder of an inventory's listing whose reads are in flight."""

    folder: Folder
    target: Target
    store: Store
    template: Job  # how its reads are made (deep, facts, digest)
    waiting: int  # reads not back yet
    held: list[tuple[Job, Outcome, ObjectInfo]] = field(default_factory=list)  # moved reads
    relisted: bool = False


class Relister:
    """Wraps a scan's reading threads' folders, jobs and ``done`` for the targets an inventory listed."""

    def __init__(
        self,
        targets: list[Target],
        options: ScanOptions,
        collector: Collector,
        keep: Callable[[str], bool] | None,
        done: Done,
    ) -> None:
        self.targets = sorted(
            (t for t in targets if t.inventory is not None and t.inventory.covered), key=lambda t: -len(t.url)
        )
        self.exclude = options.exclude
        self.deep = options.deep
        self.collector = collector
        self.keep = keep
        self.inner = done
        self.current: Folder | None = None  # the folder being planned (its jobs come next)
        self.watches: dict[int, _Watch] = {}
        self.extra: deque[Job] = deque()  # reads of keys a re-listing found
        self._last: tuple[int, _Watch | None] = (0, None)

    def folders(self, folders: Iterator[Folder]) -> Iterator[Folder]:
        for folder in folders:
            self.current = folder
            yield folder

    def jobs(self, jobs: Iterator[Job]) -> Iterator[Job]:
        return _Jobs(self, jobs)

    def done(self, job: Job, outcome: Outcome, info: ObjectInfo) -> None:
        watch = self.watches.get(job.folder_id)
        if watch is None:
            self.inner(job, outcome, info)
            return
        watch.waiting -= 1
        if watch.relisted:
            self.inner(job, outcome, info)
        elif info != job.info or (isinstance(job.store, _Noticing) and job.store.moved):
            watch.held.append((job, outcome, info))
        else:
            self.inner(job, outcome, info)  # the inventory's version: kept whatever the re-listing says
        if watch.waiting == 0:
            if watch.held and not watch.relisted:
                self._relist(job.folder_id, watch)
            else:
                del self.watches[job.folder_id]

    def admit(self, job: Job) -> Job | None:
        """``job`` as it goes to a thread (``None``: settled here)."""
        watch = self._watch(job)
        if watch is None:
            return job
        noticing = _Noticing(job.store)
        job.store = cast(Store, noticing)
        if job.info.size == 0 or is_temp_name(job.info.url):  # judged by its facts alone: check them
            try:
                fresh = watch.store.head(job.info.url)
            except TransientError:
                fresh = job.info  # judged as the inventory has it
            if fresh != job.info:
                noticing.moved = True
                if fresh is None:
                    self.done(job, Outcome(job.info.url, 0, "skipped"), job.info)
                    return None
                job.info = fresh
                self._sign(job.folder_id, fresh)
        return job

    def _watch(self, job: Job) -> _Watch | None:
        if job.folder_id == self._last[0]:
            return self._last[1]
        watch = None
        folder = self.current
        state = self.collector.folders.get(job.folder_id)
        target = self._target_of(folder.path) if folder is not None else None
        if folder is not None and target is not None and state is not None and state.path == folder.path:
            watch = _Watch(folder, target, job.store, job, state.pending)
            self.watches[job.folder_id] = watch
        self._last = (job.folder_id, watch)
        return watch

    def _target_of(self, path: str) -> Target | None:
        return next((t for t in self.targets if path == t.url or path.startswith(t.url + "/")), None)

    def _relist(self, folder_id: int, watch: _Watch) -> None:
        target = watch.target
        cut = len(target.location.key) + 1 if target.location.key else 0
        fresh = {
            info.url: info
            for info in target.store.list_folder(Location.parse(watch.folder.path))
            if not _left_out(info.key[cut:], self.exclude)
        }
        state = self.collector.folders[folder_id]
        record = state.record
        kept, again = [], []
        for job, outcome, info in watch.held:
            now = fresh.get(outcome.path)
            if now == info:
                kept.append((job, outcome, info))
                continue
            self.collector.stats.files_deep -= 1 if job.deep else 0
            if now is not None:  # yet another version than the one read: read that one
                again.append(Job(folder_id, watch.store, now, job.deep, job.facts, job.digest))
            elif record is not None:  # gone: not reported, and forgotten
                record.gone.append(outcome.path.rsplit("/", 1)[-1])
        known = set(watch.folder.files)
        template = watch.template
        for url in self.collector.kept(sorted(u for u in fresh if u not in known), self.keep):
            again.append(Job(folder_id, watch.store, fresh[url], self.deep, template.facts, template.digest))
        for job in again:
            self._sign(folder_id, job.info)
            if job.deep:
                self.collector.stats.files_deep += 1
                if record is not None:
                    record.deep.add(job.info.url)
        if record is not None:
            record.settled = False  # the folder's listing is no longer the one its digest was of
        assert target.inventory is not None
        target.inventory.relisted += 1
        watch.relisted, watch.held, watch.waiting = True, [], len(again)
        self.extra.extend(again)
        state.pending = len(kept) + len(again)
        if not again:
            del self.watches[folder_id]
        if state.pending == 0:  # everything in it is gone, nothing new: close it empty
            state.pending = 1
            self.collector.add(folder_id, [])
        for held in kept:
            self.inner(*held)

    def _sign(self, folder_id: int, info: ObjectInfo) -> None:
        """The facts of a read no plan made, for the state database."""
        state = self.collector.folders[folder_id]
        if state.record is not None:
            state.record.sigs[info.url] = sig_of_info(info)


class _Jobs:
    """The jobs to read: the re-listings' first, then the plan's (``read_all`` asks again after
    every answer, so jobs a re-listing adds late are still taken)."""

    def __init__(self, relister: Relister, jobs: Iterator[Job]) -> None:
        self.relister = relister
        self.jobs = jobs

    def __iter__(self) -> _Jobs:
        return self

    def __next__(self) -> Job:
        while True:
            if self.relister.extra:
                return self.relister.extra.popleft()
            job = self.relister.admit(next(self.jobs))
            if job is not None:
                return job


def inventory_facts(targets: list[Target]) -> list[list[Any]]:
    """What the notes say of the listings, as plain values a shard's part carries (the merge
    adds up the folders every shard re-listed): ``[manifest, date, folders re-listed, the
    targets it listed nothing under]`` per manifest."""
    facts: list[list[Any]] = []
    for manifest in dict.fromkeys(t.inventory.manifest for t in targets if t.inventory is not None):
        covered = [t for t in targets if t.inventory is not None and t.inventory.manifest == manifest]
        date = covered[0].inventory.date if covered[0].inventory is not None else ""
        listed = [t for t in covered if t.inventory is not None and t.inventory.covered]
        relisted = sum(t.inventory.relisted for t in listed if t.inventory is not None) if listed else None
        uncovered = [t.url for t in covered if t.inventory is not None and not t.inventory.covered]
        facts.append([manifest, date, relisted, uncovered])
    return facts


def inventory_notes(facts: list[list[Any]]) -> list[str]:
    """What the scan's notes say of the listings (:func:`inventory_facts`, every shard's summed):
    the inventory's date, the folders re-listed, and the targets it listed nothing under
    (listed by LIST instead)."""
    totals: dict[str, list[Any]] = {}
    for manifest, date, relisted, uncovered in facts:
        seen = totals.setdefault(manifest, [date, None, []])
        if relisted is not None:
            seen[1] = (seen[1] or 0) + relisted
        seen[2] += [u for u in uncovered if u not in seen[2]]
    notes = []
    for manifest, (date, relisted, uncovered) in totals.items():
        if relisted is not None:
            folders = f"{relisted} folder{'s' if relisted != 1 else ''}"
            notes.append(
                f"listing from the S3 inventory of {date} ({manifest}); {folders} re-listed where objects "
                "had changed since (keys added since to other folders are not seen: scan without --inventory)"
            )
        notes += [f"{url}: the inventory lists nothing under it; listed with LIST" for url in uncovered]
    return notes


__all__ = ["Relister", "inventory_facts", "inventory_notes"]
