"""``cachedoctor repair s3://bucket/prefix`` and ``recover s3://...``: a repair whose every write
is a compare-and-swap request on a :class:`~cachedoctor.stores.interface.Store` (a versioned
read, a kept copy, a replace or delete conditional on the version scanned). ``run.repair`` hands
it every target whose store has no local paths (``Capabilities.local_paths``: an object store,
``s3://`` or ``gs://``); it runs on any store, the local disk included, where it gives the file
pipeline's results byte for byte (``tests/e2e/test_repair_seam.py``), but there the file
pipeline (``batch.py``, ``replace.py``: shared fsyncs, hard links, one rename) is faster.

The order is what keeps it safe: take the prefix's lock; LIST the prefix (the versions every
later request is conditional on) and stop while a repair of an overlapping prefix holds its own
lock (``prefix_lock.PrefixLock.exclude_overlaps``); finish an interrupted run of it (its items
were confirmed when it started: ``store_recover.roll_forward``; then LIST again); scan it (the scan's own remote reader, the
same checks as on disk); plan; show the plan and ask; act (``store_act.py``); release the
lock; rescan. A dry run takes no lock and writes nothing, not even the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cachedoctor.progress import PLAN, RESCAN, Progress, Stages
from cachedoctor.repair.model import Declined, RepairError, still_failing
from cachedoctor.repair.preconditions import require_something
from cachedoctor.repair.scope import run_scope
from cachedoctor.repair.store_session import StoreSession, changed_by_others, listed, plan_listed
from cachedoctor.stores.interface import Location, ObjectInfo, Store, TransientError, is_remote

if TYPE_CHECKING:
    from cachedoctor.repair.model import RepairPlan
    from cachedoctor.repair.outcome import RepairOptions, RepairOutcome
    from cachedoctor.scan import ScanOptions, ScanResult


def one_prefix(targets: list[str]) -> str:
    """The one remote target of a repair (several, or local paths beside it: one line)."""
    if len(targets) != 1:
        remote = next(t for t in targets if is_remote(t))
        raise RepairError(remote, "repair takes one s3:// prefix at a time, on its own; run one repair per prefix")
    return targets[0]


def on_its_own(url: str) -> RepairError:
    """A dataset other than a SimpleTuner config (a manifest) whose cache is in a bucket: one
    line saying to repair that prefix on its own (remote recomputes follow SimpleTuner's plan)."""
    return RepairError(
        url,
        f"this dataset's cache is in a bucket; repair it on its own: `cachedoctor repair {url}` "
        "(remote caches are recomputed through a SimpleTuner config's aws datasets only)",
    )


def where(store: Store, url: str) -> tuple[Location, dict[str, ObjectInfo]]:
    """The prefix a repair of ``url`` works in (its lock, journal and quarantine) and its objects
    by URL: ``url`` itself, or the folder of the one object it names."""
    location = Location.parse(url)
    infos = listed(store, location)  # (a listing still failing is one line already: ``S3Store.list``)
    if not infos and location.key:
        info = _head(store, url)
        if info is not None:  # s3://bucket/key.pt: one object, repaired in its folder
            parent = location.key.rpartition("/")[0]
            return location.child(parent), {url: info}
    return location, infos


def lock_location(store: Store, url: str) -> Location:
    """The prefix whose lock a repair of ``url`` takes, known before it lists anything: ``url``
    itself, or the folder of the one object it names (one HEAD; ``where`` says the same once
    listed)."""
    location = Location.parse(url)
    if location.key and not url.endswith("/") and _head(store, url) is not None:
        return location.child(location.key.rpartition("/")[0])
    return location


def _head(store: Store, url: str) -> ObjectInfo | None:
    """``store.head(url)``, made before anything is changed: still failing, one line."""
    try:
        return store.head(url)
    except TransientError as exc:
        raise still_failing(url, exc) from None


def repair_store(
    targets: list[str],
    options: RepairOptions,
    argv: list[str],
    confirm: Callable[[RepairOutcome], bool],
    show_plan: Callable[[RepairOutcome], None],
    progress: Progress | None = None,
    take_stale: bool = False,
) -> RepairOutcome:
    """See the module's docstring. ``take_stale``: a lock whose holder is provably gone is
    cleared (``recover --apply``); else it stops the repair with one line."""
    from cachedoctor.repair.outcome import RepairOutcome
    from cachedoctor.stores.connect import store_for

    url = one_prefix(targets)
    store = store_for(url, options.scan.s3)
    stages = Stages(progress)
    if options.dry_run:
        before, location, infos = _scan(store, url, options.scan, stages.progress)
        require_something(before, options)
        outcome = RepairOutcome(before, _plan(before, location, infos, options, stages), None)
        show_plan(outcome)
        outcome.after = before if not outcome.plan.runnable() else None
        return outcome
    with StoreSession(store, lock_location(store, url), argv, fresh=options.fresh, take_stale=take_stale) as session:
        session.scope = run_scope(options.only, options.keep_blocked)
        first = where(store, url)  # listed once the lock is held: it shows a lock taken under it meanwhile
        if first[0] != session.location:
            raise RepairError(url, "names an object and a prefix at once; repair the prefix (end it with /)")
        session.exclude_overlaps(first[1])  # before anything is written, an interrupted run's items too
        if options.encoders:  # new recomputes are blocked (no dataset); an interrupted run's are finished
            from cachedoctor.encoders import load_encoder
            from cachedoctor.repair.store_recompute import recomputer

            session.recompute = recomputer(options, lambda u: store_for(u, options.scan.s3), {})
            session.encoders = options.encoders
            session.fingerprint = ",".join(load_encoder(e).fingerprint() for e in options.encoders)
        finished = session.finish_interrupted()  # (then the listing is made again: it changed)
        before, location, infos = _scan(
            store, url, options.scan, stages.progress, first if session.interrupted is None else None
        )
        if session.interrupted is None and not finished:  # (a finished interrupted run was something)
            require_something(before, options)
        outcome = RepairOutcome(before, _plan(before, location, infos, options, stages), None)
        outcome.run_id, outcome.interrupted = session.run_id, session.interrupted
        outcome.results = list(finished)
        show_plan(outcome)
        if not outcome.plan.runnable():
            outcome.after = before
            return outcome
        if not confirm(outcome):
            raise Declined()
        outcome.results += session.act(outcome.plan)
    outcome.after, _, after = _scan(store, url, options.scan, stages.renamed(RESCAN))
    outcome.others = changed_by_others(infos, after, session.written)  # not this repair's doing
    return outcome


def _scan(
    store: Store,
    url: str,
    options: ScanOptions,
    progress: Progress | None,
    listing: tuple[Location, dict[str, ObjectInfo]] | None = None,
) -> tuple[ScanResult, Location, dict[str, ObjectInfo]]:
    """The objects as listed before the scan (``listing``, or a LIST now), and the scan (one
    that could not read everything stops the repair, as on disk)."""
    from cachedoctor.scan import scan

    location, infos = listing or where(store, url)
    result = scan([url], options, progress, watch=[url])
    if result.errors:
        first = result.errors[0]
        raise RepairError(first.path, f"{first.message}; repair only runs on a cache it can read completely")
    return result, location, infos


def _plan(
    before: ScanResult, location: Location, infos: dict[str, ObjectInfo], options: RepairOptions, stages: Stages
) -> RepairPlan:
    stages.start(PLAN, len(before.findings))
    plan = plan_listed(before.findings, location, infos, options.only, options.keep_blocked)
    stages.finish(PLAN)
    return plan


__all__ = ["on_its_own", "one_prefix", "repair_store", "where"]
