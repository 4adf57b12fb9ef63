"""``cachedoctor repair`` end to end: scan, plan, confirm, act (journaled), rescan, judge.

Lossless actions and quarantine moves run in this process; recomputes go to the workers. Each
finished item is written to the journal of its cache root as soon as it is known (a batch of
lossless rewrites in one transaction, once the batch is durable), so a crash loses at most the
items in flight. The run ends with a fresh scan of the same folders: the
exit code says whether what was repaired is now clean.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import replace

from cachedoctor.layouts import LayoutName, LayoutOf, LayoutOptions, plan_for
from cachedoctor.layouts.interface import DatasetPlan, Expected
from cachedoctor.progress import LOSSLESS, PLAN, RECOMPUTE, RESCAN, Progress, Stages
from cachedoctor.repair import distributed
from cachedoctor.repair.act import close, recompute, run_lossless, share
from cachedoctor.repair.journal import Journal, finish_run, new_run_id
from cachedoctor.repair.model import ActionKind, Declined, ItemResult, ItemState, RepairError
from cachedoctor.repair.outcome import RepairOptions, RepairOutcome
from cachedoctor.repair.planner import plan_repair
from cachedoctor.repair.preconditions import check_devices, load_encoders, require_something, require_writable
from cachedoctor.repair.resume import find_interrupted, run_to_finish
from cachedoctor.repair.scope import run_scope
from cachedoctor.repair.verdicts import Verdicts
from cachedoctor.scan import ScanResult, scan
from cachedoctor.stores.connect import files_here


def _scan(
    targets: list[str],
    layout: LayoutName,
    layout_options: LayoutOptions,
    options: RepairOptions,
    progress: Progress | None = None,
    planned: tuple[DatasetPlan | None, str | None] | None = None,
) -> tuple[ScanResult, dict[str, list[Expected]], str | None, LayoutOf]:
    plan, line = planned or plan_for(layout, targets, layout_options)
    expected = plan.by_path() if plan is not None else {}
    roots = plan.roots if plan is not None else targets
    result = scan(roots, options.scan, progress, dataset=plan, watch=targets)
    return result, expected, line, (plan.layout_for if plan else None)


def repair(
    targets: list[str],
    layout: LayoutName,
    layout_options: LayoutOptions,
    options: RepairOptions,
    argv: list[str],
    confirm: Callable[[RepairOutcome], bool],
    show_plan: Callable[[RepairOutcome], None],
    progress: Progress | None = None,
) -> RepairOutcome:
    """``progress(stage, done, total)`` follows it stage by stage (:mod:`cachedoctor.progress`):
    scan, plan, lossless, recompute, rescan; on the leader rank only."""
    if not all(files_here(t) for t in targets):  # an object store: every write a conditional request
        from cachedoctor.repair.store_flow import repair_store

        return repair_store(targets, options, argv, confirm, show_plan, progress, options.take_stale_lock)
    rank = distributed.from_env()
    # each rank scans its shard of the cache, not the whole cache (recover brings its own group)
    group = distributed.join(rank) if options.scan.ranks is None else None
    ranks = group or options.scan.ranks
    try:
        try:
            planned = plan_for(layout, targets, layout_options)
        except Exception as exc:  # the other ranks are told, and rank 0 prints this one's line
            if ranks is None:
                raise
            ranks.fail(exc)
        dataset = planned[0]
        if dataset is not None and not all(files_here(r) for r in dataset.roots):  # a SimpleTuner aws dataset
            from cachedoctor.repair.store_dataset import repair_dataset
            from cachedoctor.repair.store_flow import on_its_own

            if group is not None:
                group.close(wait=False)
                group = None
            if dataset.layout != "simpletuner":
                raise on_its_own(next(r for r in dataset.roots if not files_here(r)))
            return repair_dataset(
                dataset, planned[1], targets, layout, layout_options, options, argv, confirm, show_plan, progress
            )
        if group is not None:
            options = replace(options, scan=replace(options.scan, shard=group.shard, ranks=group))
        outcome = _repair(targets, layout, layout_options, options, argv, confirm, show_plan, progress, planned, rank)
    except BaseException:
        if group is not None:
            group.close(wait=False)
        raise
    if group is not None:
        group.close()
    return outcome


def _repair(
    targets: list[str],
    layout: LayoutName,
    layout_options: LayoutOptions,
    options: RepairOptions,
    argv: list[str],
    confirm: Callable[[RepairOutcome], bool],
    show_plan: Callable[[RepairOutcome], None],
    progress: Progress | None,
    planned: tuple[DatasetPlan | None, str | None],
    rank: distributed.Rank,
) -> RepairOutcome:
    """A repair of local folders (``repair`` decided it is one), on this rank."""
    from cachedoctor.extras import require_torch
    from cachedoctor.repair.pool import devices_for

    encoders = load_encoders(options)
    modalities = {e.modality.value for e in encoders}
    check_devices(options)
    if not options.dry_run:
        distributed.init(rank)
    stages = Stages(progress if rank.leader else None)
    before, expected, line, layout_name = _scan(targets, layout, layout_options, options, stages.progress, planned)
    if before.errors:
        first = before.errors[0]
        raise RepairError(first.path, f"{first.message}; repair only runs on a cache it can read completely")
    roots = before.targets
    stages.start(PLAN, len(before.findings))
    plan = plan_repair(before.findings, roots, expected, layout_name, modalities, options.only, options.keep_blocked)
    stages.finish(PLAN)
    if not options.dry_run and any(a.kind.lossless or a.kind is ActionKind.RECOMPUTE for a in plan.runnable()):
        require_torch("repair")  # torch.load/torch.save; a quarantine-only plan runs without it
    outcome = RepairOutcome(before, plan, line, leader=rank.leader)
    journal_rank = rank.rank if rank.distributed else None
    roots_acted = sorted({a.root for a in plan.actions})
    # Every scanned root, not only those with work left: a run killed after its last write left
    # its journal in a root that is clean now, and must be closed there.
    roots_seen = sorted(set(roots_acted) | {r if os.path.isdir(r) else os.path.dirname(r) for r in roots})
    interrupted = find_interrupted(roots_seen, journal_rank, options, outcome.notes)
    if interrupted is None:  # (an interrupted run is something to do)
        require_something(before, options)
    fingerprints = ",".join(e.fingerprint() for e in encoders) or None
    interrupted = run_to_finish(interrupted, roots_acted, journal_rank, options, fingerprints, plan)
    outcome.run_id = interrupted.run_id if interrupted else new_run_id()
    outcome.interrupted = interrupted
    if rank.leader:
        show_plan(outcome)
    if options.dry_run or not plan.runnable():
        if interrupted is not None and not options.dry_run and not plan.actions:
            for root in roots_seen:  # nothing of it is left to do: it is finished
                finish_run(root, journal_rank, interrupted.run_id, "done")
        distributed.finish(rank)
        outcome.after = before if not plan.runnable() else None
        return outcome
    require_writable(roots_acted)  # before asking: "run the same repair again" cannot help there
    distributed.barrier(rank)  # every rank has scanned before any rank changes a file
    go, outcome.run_id = distributed.agree(rank, (confirm(outcome) if rank.leader else None, outcome.run_id))
    if not go:
        distributed.finish(rank)
        raise Declined()
    if interrupted is not None and not rank.distributed:  # its process is gone: a temp file in its
        # quarantine is a copy it never finished (ranks share the folder: one may be copying now)
        from cachedoctor.repair.quarantine import Quarantine

        for root in roots_seen:
            Quarantine(root, interrupted.run_id).clean_temps()
    journals = {root: Journal(root, journal_rank) for root in roots_acted}
    for root, journal in journals.items():
        journal.start(
            outcome.run_id,
            argv,
            json.dumps(list(options.encoders)) if options.encoders else None,
            fingerprints,
            outcome.resumed,
            run_scope(options.only, options.keep_blocked),
        )
        journal.plan([a for a in plan.actions if a.root == root])

    lock = threading.Lock()  # recompute results arrive from the writer thread

    def record(result: ItemResult) -> None:
        with lock:
            if result.state is not ItemState.DONE:  # "done" is a journal state on the way to verified
                outcome.results.append(result)
            action = by_path.get(result.path)
            if action is not None:
                journals[action.root].record(result)
        if action is not None and not action.blocked:
            stages.step(RECOMPUTE if action.kind is ActionKind.RECOMPUTE else LOSSLESS)

    def record_batch(results: list[ItemResult]) -> None:  # a batch of rewrites: one journal commit per root
        with lock:
            outcome.results.extend(r for r in results if r.state is not ItemState.DONE)
            per_root: dict[str, list[ItemResult]] = {}
            for result in results:
                per_root.setdefault(by_path[result.path].root, []).append(result)
            for root, part in per_root.items():
                journals[root].record_many(part)
        for _result in results:
            stages.step(LOSSLESS)

    by_path = {a.path: a for a in plan.actions}
    for action in plan.actions:
        if action.blocked:
            record(ItemResult(action.path, action.kind, ItemState.BLOCKED, action.blocked))
    mine = share(plan.runnable(), rank)
    verdicts = Verdicts()  # the rewrites' own deep verdicts: the rescan need not read them again
    try:
        lossless = [a for a in mine if a.kind is not ActionKind.RECOMPUTE]
        stages.start(LOSSLESS, len(lossless))
        run_lossless(lossless, outcome.run_id or "", record, record_batch, verdicts)
        recompute_actions = [a for a in mine if a.kind is ActionKind.RECOMPUTE]
        if recompute_actions:
            recompute(recompute_actions, options, outcome, record, rank, devices_for, stages)
    except RepairError:
        for journal in journals.values():
            journal.finish("interrupted")
        close(journals)
        raise
    for journal in journals.values():
        journal.finish("done" if not outcome.problems else "interrupted")
    close(journals)
    if interrupted is not None:  # roots where the crashed run had left nothing to do
        for root in sorted(set(roots_seen) - set(roots_acted)):
            finish_run(root, journal_rank, interrupted.run_id, "done")
    gathered = distributed.gather(rank, outcome.results if rank.distributed else None)
    if rank.distributed and gathered is not None:
        outcome.results = [r for part in gathered for r in (part or [])]
    distributed.finish(rank)
    if rank.leader or options.scan.ranks is not None:  # split over the ranks too, where they meet
        if len(verdicts):
            options = replace(options, scan=replace(options.scan, known=verdicts))
        outcome.after = _scan(targets, layout, layout_options, options, stages.renamed(RESCAN))[0]
    return outcome


def still_broken(outcome: RepairOutcome) -> list[str]:
    """Paths repair acted on (or meant to) that the final scan still finds wanting."""
    if outcome.after is None:
        return []
    planned = {a.path for a in outcome.plan.actions}
    # a diffusion-pipe index's drop acts for every shard beside it: a finding left on one is its own
    cut = {os.path.dirname(a.path) for a in outcome.plan.actions if a.kind is ActionKind.DROP_ITEMS}
    return sorted({f.path for f in outcome.after.findings if f.path in planned or os.path.dirname(f.path) in cut})


__all__ = ["RepairOptions", "RepairOutcome", "repair", "still_broken"]
