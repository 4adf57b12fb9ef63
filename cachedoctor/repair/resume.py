"""Whether a repair finishes an interrupted run or starts a new one.

A run that crashed left an unfinished run in a root's journal; the next repair finishes it unless
``--fresh`` abandons it. Split from ``run.py`` because this is the one decision about earlier runs
(an unreadable journal, a run recomputing with another encoder) that the run itself only acts on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.repair.journal import (
    Interrupted,
    JournalUnreadable,
    abandon,
    holds_no_open_run,
    interrupted_run,
    move_journal_aside,
)
from cachedoctor.repair.model import ActionKind, RepairError, RepairPlan

if TYPE_CHECKING:
    from cachedoctor.repair.outcome import RepairOptions


def find_interrupted(
    roots: list[str], rank: int | None, options: RepairOptions, notes: list[str]
) -> Interrupted | None:
    """The first interrupted run recorded in ``roots``' journals. A journal that cannot be read
    stops the repair (it may hold that run) unless ``--fresh`` gives it up, or what can still be
    read of it shows no unfinished run: then it is moved aside and a new one started."""
    found = None
    for root in roots:
        try:
            run = interrupted_run(root, rank)
        except JournalUnreadable:
            if options.dry_run or not (options.fresh or holds_no_open_run(root, rank)):
                raise
            aside = move_journal_aside(root, rank)
            notes.append(f"the repair journal in {root} could not be read; moved it to {aside} and started a new one")
            continue
        found = found or run
    return found


def run_to_finish(
    interrupted: Interrupted | None,
    roots_acted: list[str],
    rank: int | None,
    options: RepairOptions,
    fingerprints: str | None,
    plan: RepairPlan,
) -> Interrupted | None:
    """The interrupted run this repair finishes, or None: ``--fresh`` abandons it (in the journals
    too, unless a dry run). One that was recomputing with another encoder is refused, since
    finishing it would mix two models in one cache."""
    if interrupted is not None and options.fresh:
        if not options.dry_run:
            for root in roots_acted:
                abandon(root, rank, interrupted.run_id)
        return None
    if (
        interrupted is not None
        and interrupted.fingerprint
        and interrupted.recomputed  # one that stopped before its first recompute mixes no models
        and fingerprints != interrupted.fingerprint
        and any(a.kind is ActionKind.RECOMPUTE and not a.blocked for a in plan.actions)
    ):
        raise RepairError(
            " ".join(interrupted.encoders) or "--encoder",
            f"interrupted run {interrupted.run_id} was recomputing with another encoder; pass the same "
            "--encoder to finish it (one cache, one model), or --fresh to start a new run",
        )
    return interrupted
