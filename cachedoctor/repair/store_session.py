"""A repair through a store's conditional requests (``store_flow.py``): the seam between the
scan's findings and the writes, and the session that keeps them safe.

:func:`plan_listed` turns findings (paths are the objects' URLs) into the same actions the
local planner makes, each carrying the facts of the object it is conditional on. Those facts
come from a LIST made *before* the scan: an object rewritten between that LIST and the scan's
read, or after it, fails the condition of every request repair makes on it (``If-Match``) and
is skipped, so repair only ever acts on the version its scan judged.

A :class:`StoreSession` holds the prefix's lock object for its whole life (scan, plan, writes),
keeps the journal locally (``prefix_lock.journal_home``), finishes an interrupted run first
(``store_recover.roll_forward``, under that run's id and quarantine folder) and carries out a
plan (``store_act.py``). Without a dataset a recompute is blocked per item, as on disk (its
source is unknown); with one (``store_dataset.py``) the session is given a ``recompute``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from cachedoctor.findings import Finding
from cachedoctor.repair.journal import Interrupted, Journal, abandon, new_run_id
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, RepairPlan, Stat, still_failing
from cachedoctor.repair.planner import plan_repair
from cachedoctor.repair.prefix_lock import PrefixLock, journal_home
from cachedoctor.repair.quarantine import Quarantine, quarantine_url
from cachedoctor.repair.store_act import Recompute, StoreActor
from cachedoctor.repair.store_recover import roll_forward, survey_store
from cachedoctor.stores.interface import Location, ObjectInfo, Store, TransientError

NO_SOURCE = "its source is unknown: repair with the dataset (--config naming its SimpleTuner aws dataset)"
NO_RECOMPUTE = f"{NO_SOURCE} and an --encoder, or let the trainer re-cache it"
NO_TEMPS = "a temp object: cachedoctor writes none remotely; delete it by hand if no writer is running"


def listed(store: Store, location: Location) -> dict[str, ObjectInfo]:
    """Every object under ``location`` by URL (one paginated LIST), outside ``.cachedoctor/``."""
    own = Location.parse(quarantine_url(location)).key.rsplit("/", 1)[0] + "/"
    return {info.url: info for info in store.list(location) if not info.key.startswith(own)}


def plan_listed(
    findings: Iterable[Finding],
    location: Location,
    infos: Mapping[str, ObjectInfo],
    only: Collection[str] | None = None,
    keep_blocked: bool = False,
) -> RepairPlan:
    """The local planner's actions for the objects of ``location`` (rooted at its URL), each with
    its object's size, LastModified and ETag from ``infos``; a finding on an object not in
    ``infos`` (gone since the listing) plans nothing."""

    def stat_of(url: str) -> Stat | None:
        info = infos.get(url)
        return Stat(info.size, info.mtime_ns, 0) if info is not None else None

    plan = plan_repair(findings, [location.url], {}, None, set(), only, keep_blocked, stat_of=stat_of)
    actions = []
    for action in plan.actions:
        info = infos.get(action.path)
        action = replace(action, root=location.url, etag=info.etag if info else None)
        if action.kind is ActionKind.RECOMPUTE:  # as on disk without a dataset: nothing to make it from
            action = replace(action, blocked=NO_RECOMPUTE)
        elif action.note:  # a recompute it could not plan, quarantined instead: the remote reason
            action = replace(action, note=NO_SOURCE)
        elif action.kind is ActionKind.CLEANUP:
            action = replace(action, blocked=NO_TEMPS)
        actions.append(action)
    plan.actions = actions
    return plan


class StoreSession:
    """``with StoreSession(store, location, argv) as session:`` one repair (or ``recover``) of
    one prefix: the lock is taken on entry and released on exit, an error too."""

    def __init__(
        self,
        store: Store,
        location: Location,
        argv: list[str] | None = None,
        *,
        fresh: bool = False,
        take_stale: bool = False,
        command: str = "repair",
    ) -> None:
        self.store = store
        self.location = location
        self.argv = argv or []
        self.fresh = fresh
        self.take_stale = take_stale
        self.root = journal_home(location)
        self.interrupted: Interrupted | None = None
        self.run_id = new_run_id()
        self.lock = PrefixLock(store, location, self.run_id, command)
        self.journal: Journal | None = None
        self.results: list[ItemResult] = []
        #: How recomputes are made (``store_recompute.recomputer``; ``None``: they are blocked),
        #: and the encoders the journal records for them (``recover`` reuses them).
        self.recompute: Recompute | None = None
        self.encoders: tuple[str, ...] = ()
        self.fingerprint: str | None = None
        self.scope: str | None = None  # ``scope.run_scope`` of the run's options (``recover`` keeps it)
        self.written: dict[str, str | None] = {}  # what its actors wrote (``StoreActor.written``)

    def __enter__(self) -> StoreSession:
        self.lock.acquire(take_stale=self.take_stale)
        try:
            try:
                self.interrupted = survey_store(self.store, self.location).interrupted
            except TransientError as exc:  # the lock's own GET: nothing changed but the lock
                raise still_failing(self.lock.url, exc) from None
            if self.interrupted is not None and self.fresh:
                abandon(self.root, None, self.interrupted.run_id)
                self.interrupted = None
            if self.interrupted is not None:
                self.run_id = self.interrupted.run_id
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            if self.journal is not None:
                self.journal.finish("done" if kind is None else "interrupted")
                self.journal.close()
        finally:
            self.lock.release()

    def exclude_overlaps(self, infos: Mapping[str, ObjectInfo], ours: Collection[str] = ()) -> None:
        """Stop while a repair of a prefix above or under this one holds its lock (``infos``: a
        listing made once this session's lock was held; ``ours``: the locks of this run's other
        sessions; ``PrefixLock.exclude_overlaps``)."""
        self.lock.exclude_overlaps(infos, ours)

    def _start(self) -> Journal:
        if self.journal is None:
            self.journal = Journal(self.root)
            encoders = json.dumps(list(self.encoders)) if self.encoders else None
            self.journal.start(
                self.run_id, self.argv, encoders, self.fingerprint, self.interrupted is not None, self.scope
            )
        return self.journal

    def _actor(self) -> StoreActor:
        quarantine = Quarantine(self.location.url, self.run_id, self.store, resumed=self.interrupted is not None)
        journal = self._start()

        def record(result: ItemResult) -> None:
            journal.record(result)
            if result.state is not ItemState.PLANNED:
                self.results.append(result)

        actor = StoreActor(self.store, quarantine, record, recompute=self.recompute)
        actor.written = self.written
        return actor

    def finish_interrupted(self) -> list[ItemResult]:
        """Roll the interrupted run's unfinished items forward (``store_recover.py``)."""
        if self.interrupted is None or not self.interrupted.unfinished:
            return []
        actor = self._actor()
        done = len(self.results)
        again: list[Action] = []
        try:
            for action in self.interrupted.unfinished:
                result = roll_forward(actor, action)
                if result is None:
                    again.append(action)
                else:
                    actor.record(result)
            if again:
                actor.run(again)
        finally:
            actor.quarantine.write_records()
        return self.results[done:]

    def act(self, plan: RepairPlan) -> list[ItemResult]:
        """Record the plan, then carry it out; blocked actions are recorded as blocked."""
        journal = self._start()
        journal.plan(plan.actions)
        done = len(self.results)
        for action in plan.actions:
            if action.blocked:
                result = ItemResult(action.path, action.kind, ItemState.BLOCKED, action.blocked)
                journal.record(result)
                self.results.append(result)
        runnable: list[Action] = plan.runnable()
        if runnable:
            self._actor().run(runnable)
        return self.results[done:]


def changed_by_others(
    before: Mapping[str, ObjectInfo], after: Mapping[str, ObjectInfo], written: Mapping[str, str | None]
) -> set[str]:
    """The objects of the rescan's listing (``after``) that are neither what this repair wrote
    there nor, where it wrote nothing, the version it scanned (``before``): another writer's."""
    out = set()
    for url, info in after.items():
        if url in written:
            ours = written[url] is None or written[url] == info.etag
        else:
            ours = url in before and before[url].etag == info.etag
        if not ours:
            out.add(url)
    return out


__all__ = ["NO_RECOMPUTE", "NO_SOURCE", "StoreSession", "changed_by_others", "listed", "plan_listed"]
