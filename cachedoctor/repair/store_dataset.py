"""``cachedoctor repair --config X`` where a dataset keeps its cache in a store without local paths
(a SimpleTuner ``aws`` dataset's bucket): the dataset's plan, and the repair of each of its
cache prefixes through the store's conditional requests (``store_flow.py``).

It is ``store_flow.repair_store`` with the dataset beside it, in the same order: each remote
cache prefix's lock is taken (and its interrupted run finished); each prefix is listed (the
versions every later request is conditional on); the whole plan is scanned (the scan compares
the bucket's objects with the dataset's items, as on disk); the local planner plans, with the
listing's facts for each object and templates read from the bucket; then each prefix's actions
run in its session, recomputes through ``store_recompute.py``. A dry run takes no lock.

A local cache folder named by the same config (a local text-embed cache beside an ``aws``
image dataset) is not repaired in this run: its actions are blocked with the reason, and a
config naming only local datasets repairs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from cachedoctor.progress import PLAN, RESCAN, Progress, Stages
from cachedoctor.repair.model import ActionKind, Declined, RepairError, RepairPlan, Stat
from cachedoctor.repair.scope import run_scope
from cachedoctor.repair.store_session import NO_TEMPS, StoreSession, changed_by_others, listed
from cachedoctor.stores.interface import Location, ObjectInfo, Store, is_remote

if TYPE_CHECKING:
    from cachedoctor.layouts import LayoutName, LayoutOptions
    from cachedoctor.layouts.interface import DatasetPlan, Expected
    from cachedoctor.repair.outcome import RepairOptions, RepairOutcome
    from cachedoctor.scan import ScanResult

LOCAL_BESIDE = (
    "a local cache of a config whose other datasets are in a bucket; "
    "repair it with a config that names only its local datasets"
)


def store_roots(plan: DatasetPlan | None) -> list[str]:
    return [r for r in plan.roots if is_remote(r)] if plan is not None else []


def repair_dataset(
    plan: DatasetPlan,
    line: str | None,
    targets: list[str],
    layout: LayoutName,
    layout_options: LayoutOptions,
    options: RepairOptions,
    argv: list[str],
    confirm: Callable[[RepairOutcome], bool],
    show_plan: Callable[[RepairOutcome], None],
    progress: Progress | None = None,
) -> RepairOutcome:
    """See the module's docstring."""
    from cachedoctor.encoders import load_encoder
    from cachedoctor.extras import require_torch
    from cachedoctor.repair.outcome import RepairOutcome
    from cachedoctor.repair.store_recompute import recomputer
    from cachedoctor.stores.connect import store_for

    if options.encoders:
        require_torch("repair")
    encoders = [load_encoder(spec) for spec in options.encoders]  # validates the specs, loads nothing
    fingerprint = ",".join(e.fingerprint() for e in encoders) or None
    roots = store_roots(plan)
    stores = {r: store_for(r, plan.remote_settings.get(r, options.scan.s3)) for r in roots}

    def source_store(url: str) -> Store:  # the dataset's images: its bucket, its settings
        bucket = Location.parse(url).bucket
        root = next((r for r in roots if Location.parse(r).bucket == bucket), None)
        return stores[root] if root else store_for(url, options.scan.s3)

    stages = Stages(progress)
    with contextlib.ExitStack() as stack:
        sessions: dict[str, StoreSession] = {}
        results = []
        for root in roots if not options.dry_run else ():
            session = StoreSession(
                stores[root], Location.parse(root), argv, fresh=options.fresh, take_stale=options.take_stale_lock
            )
            stack.enter_context(session)
            session.recompute = recomputer(options, source_store, plan.remote_sources) if encoders else None
            session.encoders, session.fingerprint = options.encoders, fingerprint
            session.scope = run_scope(options.only, options.keep_blocked)
            _same_model(session, fingerprint)
            sessions[root] = session
        infos = {r: listed(stores[r], Location.parse(r)) for r in roots}  # (once the locks are held)
        for root, session in sessions.items():  # a repair of an overlapping prefix: stop before any write
            session.exclude_overlaps(infos[root], {s.lock.url for s in sessions.values()})
        for root, session in sessions.items():
            finished = session.finish_interrupted()
            if finished:  # the listing changed
                infos[root] = listed(stores[root], Location.parse(root))
            results += finished
        expected = plan.by_path()  # (the scan consumes the plan)
        before = _scan(plan, targets, options, stages.progress)
        stages.start(PLAN, len(before.findings))
        modalities = {e.modality.value for e in encoders}
        repair_plan = plan_dataset(before, plan, expected, infos, stores, modalities, options)
        stages.finish(PLAN)
        outcome = RepairOutcome(before, repair_plan, line)
        outcome.results = results
        first = next(iter(sessions.values()), None)
        if first is not None:
            outcome.run_id, outcome.interrupted = first.run_id, first.interrupted
        show_plan(outcome)
        if options.dry_run or not repair_plan.runnable():
            outcome.after = before if not repair_plan.runnable() else None
            return outcome
        if not confirm(outcome):
            raise Declined()
        for root, session in sessions.items():
            outcome.results += session.act(RepairPlan([a for a in repair_plan.actions if a.root == root]))
        for action in repair_plan.actions:  # the local ones: recorded as blocked, in no journal
            if action.root not in sessions and action.blocked:
                from cachedoctor.repair.model import ItemResult, ItemState

                outcome.results.append(ItemResult(action.path, action.kind, ItemState.BLOCKED, action.blocked))
    from cachedoctor.layouts import plan_for

    again, _ = plan_for(layout, targets, layout_options)  # the scan consumed the plan: made again
    outcome.after = _scan(again or plan, targets, options, stages.renamed(RESCAN))
    seen = {(f.kind, f.path) for f in before.findings}
    new = {f.path for f in outcome.after.findings if (f.kind, f.path) not in seen}
    if new:  # a finding the repair did not start with: its doing, or another writer's (one LIST a root says)
        written = {u: e for s in sessions.values() for u, e in s.written.items()}
        for root in sessions:
            now = listed(stores[root], Location.parse(root))
            outcome.others |= changed_by_others(infos[root], now, written) & new
    return outcome


def _same_model(session: StoreSession, fingerprint: str | None) -> None:
    """One cache, one model: an interrupted run's recomputes are finished with its encoder."""
    run = session.interrupted
    if run is None or not run.fingerprint or fingerprint == run.fingerprint:
        return
    if any(a.kind is ActionKind.RECOMPUTE for a in run.unfinished):
        raise RepairError(
            " ".join(run.encoders) or "--encoder",
            f"interrupted run {run.run_id} was recomputing with another encoder; pass the same "
            "--encoder to finish it (one cache, one model), or --fresh to start a new run",
        )


def _scan(plan: DatasetPlan, targets: list[str], options: RepairOptions, progress: Progress | None) -> ScanResult:
    from cachedoctor.scan import scan

    result = scan(plan.roots, options.scan, progress, dataset=plan, watch=targets)
    if result.errors:
        first = result.errors[0]
        raise RepairError(first.path, f"{first.message}; repair only runs on a cache it can read completely")
    return result


def plan_dataset(
    before: ScanResult,
    plan: DatasetPlan,
    expected: dict[str, list[Expected]],
    infos: dict[str, dict[str, ObjectInfo]],
    stores: dict[str, Store],
    modalities: set[str],
    options: RepairOptions,
) -> RepairPlan:
    """The local planner's actions, each remote one rooted at its prefix with its object's facts
    from ``infos`` (prefix -> URL -> listed object); local ones blocked (``LOCAL_BESIDE``)."""
    from cachedoctor.repair.planner import plan_repair
    from cachedoctor.repair.prefix_lock import journal_home
    from cachedoctor.repair.store_recompute import ListedTemplates

    def root_of(path: str) -> str | None:
        return next((r for r in infos if path.startswith(r.rstrip("/") + "/")), None)

    def stat_of(path: str) -> Stat | None:
        root = root_of(path)
        if root is None:
            return Stat.of(path)
        info = infos[root].get(path)
        return Stat(info.size, info.mtime_ns, 0) if info is not None else None

    every = {url: info for listing in infos.values() for url, info in listing.items()}

    def store_of(url: str) -> Store:
        return stores[root_of(url) or next(iter(stores))]

    home = journal_home(Location.parse(next(iter(infos)))) if infos else ""
    templates = ListedTemplates({f.path for f in before.findings}, every, store_of, home)
    out = plan_repair(
        before.findings,
        plan.roots,
        expected,
        plan.layout_for,
        modalities,
        options.only,
        options.keep_blocked,
        stat_of=stat_of,
        templates=templates,
    )
    actions = []
    for action in out.actions:
        root = root_of(action.path)
        if root is None:
            actions.append(action if action.blocked else replace(action, blocked=LOCAL_BESIDE))
            continue
        info = infos[root].get(action.path)
        action = replace(action, root=root, etag=info.etag if info else None)
        if action.kind is ActionKind.CLEANUP:
            action = replace(action, blocked=NO_TEMPS)
        actions.append(action)
    out.actions = actions
    return out


__all__ = ["LOCAL_BESIDE", "plan_dataset", "repair_dataset", "store_roots"]
