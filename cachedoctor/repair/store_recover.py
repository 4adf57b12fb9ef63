"""Finishing a repair through a store's conditional requests (``store_flow.py``) that was killed:
each item its journal left unfinished is rolled forward from what the store shows now, without
a scan.

The journal (local) says which items were planned and which had their old version kept; the
object's ETag now, against the one the plan was made on, says how far the item got:

* still the planned version: nothing a reader sees has changed; the item is done again from
  step 1 (``store_act.py``): the copy already in the quarantine is found by one HEAD and
  reused, so the quarantine holds each object once;
* gone: a move whose DELETE went through (its copy is in the quarantine: done), or an object
  someone else removed (skipped);
* another version: a PUT of ours that went through before the journal heard of it (its old
  version is in the quarantine) is read back once and judged; anything else is some other
  writer's, and is left for the next scan.

A recompute is rolled forward the same way, but "do it again" is returned as ``None``: the
caller runs those together through the recompute loop (one model load, batched). A missing
entry (nothing was there to keep) that is present now is read back and judged.

Records the killed run had not written yet are written from the journal's actions.
"""

from __future__ import annotations

from dataclasses import dataclass

from cachedoctor.repair.journal import Interrupted, interrupted_run
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState
from cachedoctor.repair.prefix_lock import Holder, journal_home, read_holder
from cachedoctor.repair.quarantine import Quarantine, same_version, versions_kept
from cachedoctor.repair.store_act import StoreActor, info_of, judge
from cachedoctor.stores.interface import Location, ObjectInfo, Store


@dataclass(frozen=True)
class StoreSurvey:
    """What a crash left for one remote prefix: its lock object and its interrupted run."""

    location: Location
    lock: Holder | None
    locked: bool  # a lock object exists (``lock`` is ``None`` when it cannot be read)
    interrupted: Interrupted | None

    @property
    def stale_lock(self) -> bool:
        return self.locked and self.lock is not None and self.lock.gone

    @property
    def empty(self) -> bool:
        return not self.locked and self.interrupted is None


def survey_store(store: Store, location: Location) -> StoreSurvey:
    """One HEAD (and a GET when a lock is there), and the local journal."""
    holder, locked = read_holder(store, location)
    return StoreSurvey(location, holder, locked, interrupted_run(journal_home(location)))


def roll_forward(actor: StoreActor, action: Action) -> ItemResult | None:
    """Finish one unfinished item of an interrupted run (see the module's docstring); ``None``:
    a recompute to be done again."""
    store, quarantine = actor.store, actor.quarantine
    if action.kind is ActionKind.RECOMPUTE and action.before is None:
        return _was_missing(actor, action)
    planned = info_of(action)
    now = store.head(action.path)
    if now is not None and now.etag == planned.etag:  # untouched: do it (again); a kept copy is reused
        return None if action.kind is ActionKind.RECOMPUTE else actor.one(action)
    dest = quarantine.destination(action.path)
    kept = store.head(dest)
    ours = kept is not None and same_version(kept, planned, versions_kept(store))
    if now is None:
        if ours and action.kind is ActionKind.QUARANTINE:
            quarantine.note(dest, planned, action.reasons, action.kind.value)
            return ItemResult(
                action.path, action.kind, ItemState.VERIFIED, "moved to the quarantine", dest, planned.size
            )
        return ItemResult(
            action.path, action.kind, ItemState.SKIPPED, "gone since the scan (deleted by another process)"
        )
    if not ours or action.kind is ActionKind.QUARANTINE:
        return ItemResult(
            action.path, action.kind, ItemState.SKIPPED, "changed by another writer; the next scan judges it"
        )
    return _written_before_kill(store, quarantine, action, planned, now, dest)


def _was_missing(actor: StoreActor, action: Action) -> ItemResult | None:
    """A missing entry: still missing (``None``: made again), or there now, written by the
    killed run or by the trainer since: read back and judged either way."""
    now = actor.store.head(action.path)
    if now is None:
        return None
    problem = judge(action, actor.store.read_whole(now, now.size), scale=False)  # maybe the trainer's
    if problem:
        return ItemResult(action.path, action.kind, ItemState.SKIPPED, f"another version is there, and it {problem}")
    return ItemResult(
        action.path, action.kind, ItemState.VERIFIED, "written and checked (read back by recover)", None, 0, now.size
    )


def _written_before_kill(
    store: Store, quarantine: Quarantine, action: Action, planned: ObjectInfo, now: ObjectInfo, dest: str
) -> ItemResult:
    """The PUT went through and the kill came before the journal heard of it: read it back."""
    data = store.read_whole(now, now.size)
    problem = judge(action, data, scale=False)  # judged before its PUT
    quarantine.note(dest, planned, action.reasons, action.kind.value, replaced_by=now.etag)
    if problem:
        return ItemResult(action.path, action.kind, ItemState.FAILED, f"another version is there, and it {problem}")
    return ItemResult(
        action.path,
        action.kind,
        ItemState.VERIFIED,
        "written and checked (read back by recover)",
        dest,
        planned.size,
        now.size,
    )


__all__ = ["StoreSurvey", "roll_forward", "survey_store"]
