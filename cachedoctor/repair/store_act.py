"""Carrying out a repair plan through a store's conditional requests (any ``Store``; the path of
object stores, ``store_flow.py``): each object replaced by one conditional write, its old
version first copied into the quarantine and the copy verified; an unfixable object moved out
by copy, verify, conditional delete. The steps of one object, and what a kill between any two
of them leaves:

1. one whole GET (conditional on the scanned ETag), the new bytes made from it (``lossless.py``,
   as on disk) and judged by the scan's own readers and checks (``verify.problems_of`` of the
   bytes in memory): repair never writes an object its own scan would reject;
2. the server-side copy into the quarantine, verified (``quarantine.py``); the journal
   records the kept copy (the object is still the old one: a kill here changes nothing a reader
   sees, and ``recover`` finishes the item);
3. the PUT of the new bytes, conditional on the old ETag (``If-Match``: a trainer's write since
   the scan is never overwritten), or for a move the DELETE, conditional too;
4. the journal records the item verified (a kill between 3 and 4 leaves a replaced object whose
   row says "kept": ``recover`` reads it, finds it healthy and closes the item).

A conditional request whose answer is lost is retried by the store, and the retry is refused
(the first attempt did it): a PUT refused whose object holds exactly the new bytes is this
repair's own write; a DELETE that finds nothing left the object where a move wants it. The kept
copy is given up only when another writer's version stands in the object's place.

A recompute (``store_recompute.py``) replaces step 1: the entry's source image is fetched and
encoded by the local recompute's own loop, and its bytes come to :meth:`StoreActor.put_made`
for steps 2-4; a missing entry has nothing to keep and is created by a PUT conditional on there
still being no object (``If-None-Match: *``: a trainer that re-cached it meanwhile wins).

Items run on a small pool of threads: requests, not bytes, are what an object costs, and the
waits overlap. The journal (local SQLite) is written under the actor's lock, the records under the quarantine's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeAlias

from cachedoctor.lifetime import reraise_interrupt
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, NotRewritable, RepairError
from cachedoctor.repair.peer_scale import UNNAMED, EncoderUsed
from cachedoctor.repair.quarantine import CopyUnverified, Quarantine
from cachedoctor.repair.replace import crash_point
from cachedoctor.stores.interface import (
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    Store,
    TransientError,
)

#: Objects in flight at once (each is a handful of requests; torch's work holds the GIL anyway).
THREADS = 8
#: Items between two writes of the quarantine's records object.
RECORDS_EVERY = 64

CHANGED = "changed since the scan; left for the final scan to judge"
CREATED = "written by another process since the scan (the trainer re-cached it?); left for the final scan to judge"
NOT_HERE = "recomputes of a remote cache need the dataset (--config) and an --encoder"
GONE = "gone since the scan (deleted by another process)"


def info_of(action: Action) -> ObjectInfo:
    """The object as the scan saw it (what every request of the action is conditional on)."""
    before = action.before
    assert before is not None and action.etag is not None, "a remote action carries its object's facts"
    return ObjectInfo(action.path, before.size, action.etag, before.mtime_ns)


def new_bytes(action: Action, raw: bytes) -> bytes:
    """The lossless rewrite of ``raw`` (``NotRewritable`` when it cannot be rewritten)."""
    from cachedoctor.repair.batch import lossless_bytes

    return lossless_bytes(action, raw, action.path)


def judge(
    action: Action, data: bytes, encoder: EncoderUsed = UNNAMED, notes: list[str] | None = None, *, scale: bool = True
) -> str | None:
    """What the scan would find wrong with ``data`` at ``action.path`` (``None``: nothing); a
    recompute judged against its peers' scale too unless ``scale=False`` (``verify.problems_of``)."""
    from cachedoctor.repair.verify import problems_of

    return problems_of(action, "", data, encoder=encoder, notes=notes, scale=scale)


#: Runs a run's recompute actions through ``actor.put_made`` (``store_recompute.recomputer``).
Recompute: TypeAlias = "Callable[[list[Action], StoreActor], None]"


class StoreActor:
    """Runs the actions of one run on one prefix. ``record(result)`` is told each step (a kept
    copy as a ``planned`` result naming it, then the end state), under the actor's lock."""

    def __init__(
        self,
        store: Store,
        quarantine: Quarantine,
        record: Callable[[ItemResult], None],
        threads: int | None = None,
        recompute: Recompute | None = None,
    ) -> None:
        self.recompute = recompute
        self.store = store
        self.quarantine = quarantine
        self._record = record
        self.threads = threads or THREADS
        self.lock = threading.Lock()
        self.since_records = 0
        #: URL -> the ETag of what this actor wrote there (``None``: created, ETag not returned).
        self.written: dict[str, str | None] = {}

    def record(self, result: ItemResult) -> None:
        with self.lock:
            self._record(result)
            if result.state is not ItemState.PLANNED:
                self.since_records += 1
                if self.since_records >= RECORDS_EVERY:
                    self.quarantine.write_records()
                    self.since_records = 0

    def run(self, actions: Iterable[Action]) -> None:
        """Every action; a :class:`RepairError` (credentials revoked, the bucket gone) stops the
        run after the items in flight, which are recorded as they end."""
        todo = [a for a in actions if a.kind is not ActionKind.RECOMPUTE]
        remade = [a for a in actions if a.kind is ActionKind.RECOMPUTE]
        try:
            self._each(todo)
            if remade and self.recompute is not None:
                self.recompute(remade, self)
            for action in remade if self.recompute is None else ():
                self.record(ItemResult(action.path, action.kind, ItemState.BLOCKED, NOT_HERE))
        finally:
            self.quarantine.write_records()

    def _each(self, todo: list[Action]) -> None:
        if self.threads <= 1 or len(todo) <= 1:
            for action in todo:
                self.record(self.one(action))
            return
        with ThreadPoolExecutor(self.threads, thread_name_prefix="cachedoctor-remote") as pool:
            futures = [pool.submit(self.one, a) for a in todo]
            stop: BaseException | None = None
            for future in futures:
                try:
                    self.record(future.result())
                except BaseException as exc:  # the first stop wins; the rest still end
                    if stop is None:
                        stop = exc
                        for other in futures:
                            other.cancel()
            if stop is not None:
                raise stop

    def one(self, action: Action) -> ItemResult:
        """One action, start to end; one bad object never stops the run."""

        def do() -> ItemResult:
            if action.kind is ActionKind.QUARANTINE:
                return self.move(action)
            if action.kind.lossless:
                return self.rewrite(action)
            return ItemResult(action.path, action.kind, ItemState.BLOCKED, f"{action.kind.value} is not done remotely")

        return self.guarded(action, do)

    def put_made(self, action: Action, make: Callable[[Action], bytes], encoder: EncoderUsed = UNNAMED) -> ItemResult:
        """Steps 2-4 for a recompute's ``make(action)`` bytes, judged first (the sink's write;
        ``encoder``: the ``--encoder`` that made them, named in a refusal)."""
        from cachedoctor.repair.verify import unfit_line, with_notes

        notes: list[str] = []

        def do() -> ItemResult:
            data = make(action)
            problem = judge(action, data, encoder, notes)
            if problem:
                return ItemResult(action.path, action.kind, ItemState.FAILED, unfit_line(problem, "object"))
            if action.before is not None:
                return self.replace_with(action, info_of(action), data)
            crash_point("remote-before-put")
            if not self.store.put_if_absent(action.path, data) and self.own_write(action.path, data) is None:
                return ItemResult(action.path, action.kind, ItemState.SKIPPED, CREATED)  # (not a lost answer of ours)
            self.written[action.path] = None
            crash_point("remote-after-put")
            return ItemResult(action.path, action.kind, ItemState.VERIFIED, "written and checked", None, 0, len(data))

        return with_notes(self.guarded(action, do), notes)

    def guarded(self, action: Action, do: Callable[[], ItemResult]) -> ItemResult:
        """``do()``, its object's faults turned into the item's result."""
        try:
            return do()
        except ObjectGone:
            return ItemResult(action.path, action.kind, ItemState.SKIPPED, GONE)
        except ObjectChanged:
            return ItemResult(action.path, action.kind, ItemState.SKIPPED, CHANGED)
        except NotRewritable as exc:
            return ItemResult(action.path, action.kind, ItemState.BLOCKED, str(exc))
        except (CopyUnverified, TransientError) as exc:
            return ItemResult(action.path, action.kind, ItemState.FAILED, str(exc))
        except (RepairError, RemoteError):  # a full journal, credentials revoked: the run stops
            raise
        except Exception as exc:  # a reader or torch bug on one object
            reraise_interrupt(exc)
            return ItemResult(action.path, action.kind, ItemState.FAILED, f"{type(exc).__name__}: {exc}")

    def rewrite(self, action: Action) -> ItemResult:
        info = info_of(action)
        raw = self.store.read_whole(info, info.size)
        data = new_bytes(action, raw)
        problem = judge(action, data)
        if problem:
            from cachedoctor.repair.verify import unfit_line

            return ItemResult(action.path, action.kind, ItemState.FAILED, unfit_line(problem, "object"))
        return self.replace_with(action, info, data)

    def replace_with(self, action: Action, info: ObjectInfo, data: bytes) -> ItemResult:
        """Steps 2-4: the old version kept, then one PUT conditional on it."""
        dest = self.keep(action, info)
        crash_point("remote-before-put")
        try:
            new = self.store.put_if_match(action.path, data, info.etag)
        except ObjectGone:
            raise  # deleted by another writer since the scan: the kept copy is all that is left of it
        except ObjectChanged:
            found = self.own_write(action.path, data)
            if found is None:  # another writer's version: the copy replaced nothing
                self.quarantine.abandon(dest)
                raise
            new = found  # the PUT went through and its answer was lost: the retry met our own version
        if new.size != len(data):
            raise TransientError(f"{action.path}: wrote {len(data)} bytes, the server holds {new.size}")
        self.quarantine.replaced(dest, new.etag)
        self.written[action.path] = new.etag
        crash_point("remote-after-put")
        return ItemResult(
            action.path, action.kind, ItemState.VERIFIED, "written and checked", dest, info.size, len(data)
        )

    def own_write(self, url: str, data: bytes) -> ObjectInfo | None:
        """The object at ``url`` if it holds exactly ``data`` (read back whole: an ETag is not a
        digest on every store), else ``None``. A conditional PUT is retried by the store when its
        answer is lost; the retry is then refused, because the first attempt wrote this version."""
        now = self.store.head(url)
        if now is None or now.size != len(data):
            return None
        try:
            return now if self.store.read_whole(now, len(data)) == data else None
        except (ObjectGone, ObjectChanged):
            return None

    def move(self, action: Action) -> ItemResult:
        info = info_of(action)
        dest = self.keep(action, info)
        crash_point("remote-before-delete")
        try:
            self.store.delete_if_match(action.path, info.etag)
        except ObjectGone:
            pass  # gone: this DELETE went through and its answer was lost, or another writer deleted
            # it; either way the object is out of the cache and its bytes are in the kept copy
        except ObjectChanged:  # another writer's version stands: the copy replaced nothing
            self.quarantine.abandon(dest)
            raise
        crash_point("remote-after-delete")
        why = "moved to the quarantine"
        if action.note:
            why += f" (not recomputed: {action.note}; the trainer re-caches it)"
        return ItemResult(action.path, action.kind, ItemState.VERIFIED, why, dest, info.size, 0)

    def keep(self, action: Action, info: ObjectInfo) -> str:
        """Step 2: the verified copy, then the journal told (before anything changes)."""
        crash_point("remote-before-copy")
        dest = self.quarantine.keep(info, action.reasons, action.kind.value)
        self.record(ItemResult(action.path, action.kind, ItemState.PLANNED, "kept; not yet replaced", dest))
        crash_point("remote-after-copy")
        return dest


__all__ = [
    "CHANGED",
    "CREATED",
    "GONE",
    "NOT_HERE",
    "THREADS",
    "Recompute",
    "StoreActor",
    "info_of",
    "judge",
    "new_bytes",
]
