"""Carrying out a repair plan: which actions are this rank's, lossless ones in this process,
recomputes on the workers. Split from ``run.py``, which decides *whether* and *what* to run
(scan, plan, confirm, journal); this module only runs what it is handed and reports each item.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cachedoctor.progress import RECOMPUTE, Stages
from cachedoctor.repair import distributed
from cachedoctor.repair.journal import Journal
from cachedoctor.repair.model import Action, ActionKind, ItemResult

if TYPE_CHECKING:
    from cachedoctor.repair.outcome import RepairOptions, RepairOutcome
    from cachedoctor.repair.verdicts import Verdicts
    from cachedoctor.scan.outcome import Outcome


def share(actions: list[Action], rank: distributed.Rank) -> list[Action]:
    """This rank's deterministic share of the non-recompute actions (recomputes are split by cost)."""
    if not rank.distributed:
        return actions
    local = [
        a for i, a in enumerate(a for a in actions if a.kind is not ActionKind.RECOMPUTE) if i % rank.world == rank.rank
    ]
    return local + [a for a in actions if a.kind is ActionKind.RECOMPUTE]


def run_lossless(
    actions: list[Action],
    run_id: str,
    record: Callable[[ItemResult], None],
    record_batch: Callable[[list[ItemResult]], None] | None = None,
    verdicts: Verdicts | None = None,
) -> None:
    """Lossless rewrites, moves and clean-ups in plan order, in this process; the rewrites made
    durable a folder batch at a time (``batch.py``: one journal transaction per batch through
    ``record_batch`` when given, else ``record`` per item). (Threads were measured and lost: the
    per-file work is mostly Python holding the GIL; bench/README.md.) ``verdicts`` gets the deep
    verdict of each rewrite put in place, for the final scan (``verdicts.py``)."""
    from cachedoctor.repair.batch import Batcher, lossless_bytes
    from cachedoctor.repair.verify import problems_of

    def each(results: list[ItemResult]) -> None:
        for result in results:
            record(result)

    def judge(action: Action, temp: str, data: bytes) -> str | None:
        fit: list[Outcome] = []
        problem = problems_of(action, temp, data, found_fit=fit)
        if fit and verdicts is not None:
            verdicts.judged(action.path, fit[0])
        return problem

    placed = verdicts.placed if verdicts is not None else None
    with Batcher(run_id, record_batch or each, lossless_bytes, judge, placed=placed) as batcher:
        for action in actions:
            if action.kind.lossless:
                batcher.add(action)
            else:
                record(_run_local(action, run_id))


def _run_local(action: Action, run_id: str) -> ItemResult:
    """A move to the quarantine or a clean-up (lossless rewrites go through the batch)."""
    from cachedoctor.repair.quarantine import Quarantine
    from cachedoctor.repair.replace import run_action

    return run_action(action, Quarantine(action.root, run_id))


def recompute(
    actions: list[Action],
    options: RepairOptions,
    outcome: RepairOutcome,
    record: Callable[[ItemResult], None],
    rank: distributed.Rank,
    devices_for: Callable[[int | None, str, int], list[str]],
    stages: Stages,
) -> None:
    from cachedoctor.repair.pool import make_batches, run_pool, split, work
    from cachedoctor.repair.posterior import Models

    models = Models(options.encoders, options.posterior, options.seed)
    batches = make_batches(actions, options.batch_size)
    if rank.distributed:
        batches = split(batches, rank.world)[rank.rank]
    stages.start(RECOMPUTE, sum(len(b) for b in batches))
    if rank.distributed:
        device = f"cuda:{rank.local}" if options.gpus or options.device == "cuda" else options.device
        work(batches, models, device, outcome.run_id or "", record)
        return
    devices = devices_for(options.gpus, options.device, options.workers)
    if len(devices) == 1:
        work(batches, models, devices[0], outcome.run_id or "", record)
        return
    outcome.problems.extend(run_pool(split(batches, len(devices)), models, devices, outcome.run_id or "", record))


def close(journals: dict[str, Journal]) -> None:
    for journal in journals.values():
        journal.close()


__all__ = ["close", "recompute", "run_lossless", "share"]
