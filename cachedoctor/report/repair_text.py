"""What `repair` and `recover` print: the plan, the outcome, and what a crash left behind.

:class:`RepairReport` owns their exit code, as :class:`~cachedoctor.report.outcome.ScanReport`
owns the scan's: CLEAN when everything planned was done, verified and the rescan is clean of it
(or, for a dry run or a survey, when there is nothing to do); FINDINGS otherwise.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.text import human_size
from cachedoctor.statedir import quarantine_root

if TYPE_CHECKING:  # type-only: printing a plan must not import the repair machinery
    from cachedoctor.cli.environment import Environment
    from cachedoctor.repair.recover import Survey
    from cachedoctor.repair.run import RepairOutcome


@dataclass(frozen=True)
class RepairReport:
    """The verdict of one ``repair`` or ``recover``. ``outcome`` is the repair's ``RepairOutcome``
    (``None`` when it did not run: declined, or ``recover`` without ``--apply``); ``broken`` the
    paths the final scan still finds wanting; ``survey`` what ``recover`` found."""

    outcome: Any = None
    broken: tuple[str, ...] = ()
    dry_run: bool = False
    declined: bool = False
    survey: Any = None

    @property
    def states(self) -> Counter:
        return Counter(r.state.value for r in self.outcome.results) if self.outcome is not None else Counter()

    @property
    def clean(self) -> bool:
        if self.declined:
            return False
        if self.outcome is None:
            return self.survey is None or self.survey.empty
        plan = self.outcome.plan
        if self.dry_run:
            return not (plan.actions or plan.needs_person)
        if not self.outcome.leader:  # the leader rank judges the run
            return True
        states = self.states
        return (
            not self.broken
            and not states.get("failed")
            and not states.get("blocked")
            and not self.outcome.problems
            and not plan.needs_person
        )

    @property
    def worse(self) -> dict[str, tuple[int, int]]:
        """Finding kinds with more files after the repair than before: ``kind -> (before, after)``.
        Never expected (each write is judged first); reported, and not clean, if it happens."""
        if self.outcome is None or self.outcome.after is None or self.dry_run:
            return {}
        # A file the plan quarantined in place of a recompute is missing now by design (the plan
        # said so: the trainer re-caches it); that is not a repair gone wrong.
        moved = {r.path for r in self.outcome.results if r.quarantined and r.kind.value == "quarantine"}
        before = Counter(k for k, _p in {(f.kind, f.path) for f in self.outcome.before.findings})
        after = Counter(
            k
            for k, p in {(f.kind, f.path) for f in self.outcome.after.findings}
            if not (k == "missing-entry" and p in moved)
        )
        return {k: (before[k], n) for k, n in sorted(after.items()) if n > before[k]}

    @property
    def exit_code(self) -> ExitStatus:
        return ExitStatus.CLEAN if self.clean and not self.worse else ExitStatus.FINDINGS


def print_plan(outcome: RepairOutcome, out: TextIO) -> None:
    from cachedoctor.repair.model import ActionKind

    result, plan = outcome.before, outcome.plan
    mode = "deep" if result.options.deep else "quick"
    files = len({f.path for f in result.findings})
    print(
        f"cachedoctor repair: {result.stats.files_read} files scanned ({mode}), {len(result.findings)} finding(s) in {files} file(s)",
        file=out,
    )
    if outcome.layout_line:
        print(outcome.layout_line, file=out)
    for note in getattr(outcome, "notes", ()):
        print(f"note: {note}", file=out)
    if outcome.interrupted is not None:
        gone = outcome.interrupted
        print(
            f"resuming interrupted run {gone.run_id}: {len(gone.verified)} item(s) were finished before it stopped, "
            f"{len(gone.unfinished)} were not; this scan shows what is still to do",
            file=out,
        )
    if not plan.actions and not plan.needs_person:
        print("nothing to repair", file=out)
        return
    print("plan:", file=out)
    for label, count in plan.counts().items():
        if label == "blocked":
            continue
        extra = (
            f" ({human_size(plan.rewrite_bytes(ActionKind(label)))} to rewrite)"
            if label in ("rewrite-cpu", "clone-storage")
            else ""
        )
        print(f"  {label:<14} {count} file(s){extra}", file=out)
        if label == "quarantine":
            instead = Counter(a.note for a in plan.actions if a.note)
            for why, n in instead.most_common():
                print(f"  {'':<14} {n} of them not recomputed ({why}): the trainer re-caches them", file=out)
    blocked = Counter(a.blocked for a in plan.actions if a.blocked)
    for why, count in blocked.most_common():
        print(f"  {'cannot fix':<14} {count} file(s): {why}", file=out)
    if plan.needs_person:
        print(
            f"  {'needs a person':<14} {len(plan.needs_person)} file(s): two dataset items map to one file; rename all but one",
            file=out,
        )


def print_result(report: RepairReport, out: TextIO, env: Environment) -> ExitStatus:
    from cachedoctor.repair.model import ItemState

    outcome, broken, states = report.outcome, report.broken, report.states
    print(
        "done: "
        + ", ".join(
            f"{states.get(s.value, 0)} {s.value}"
            for s in (ItemState.VERIFIED, ItemState.SKIPPED, ItemState.BLOCKED, ItemState.FAILED)
        ),
        file=out,
    )
    for r in outcome.results:
        if r.state in (ItemState.FAILED,):
            print(f"  failed: {os.path.relpath(r.path, env.cwd)}: {r.message}", file=out)
    for problem in outcome.problems:
        print(f"  worker: {problem}", file=out)
    kept = {r.path for r in outcome.results if r.quarantined}
    moved = sorted({a.root for a in outcome.plan.actions if a.path in kept})
    for root in moved:
        print(f"quarantine: {os.path.join(quarantine_root(root), outcome.run_id)}", file=out)
    if moved:  # one run id across every root: one command puts it all back
        roots = " ".join(shlex.quote(r) for r in moved)
        print(f"undo: cachedoctor quarantine restore {outcome.run_id} {roots}", file=out)
    if outcome.after is not None:
        before, after = (
            Counter(f.kind for f in outcome.before.findings),
            Counter(f.kind for f in outcome.after.findings),
        )
        changes = [f"{k} {before.get(k, 0)} -> {after.get(k, 0)}" for k in sorted(set(before) | set(after))]
        print("before -> after: " + (", ".join(changes) if changes else "clean"), file=out)
    for kind, (was, now) in report.worse.items():
        print(f"worse: {kind} in {now} file(s), {was} before the repair; please report this", file=out)
    if report.clean and not report.worse:
        print("repaired: the rescan is clean of what was repaired", file=out)
    else:
        left = len(
            set(broken)
            | set(outcome.plan.needs_person)
            | {r.path for r in outcome.results if r.state.value in ("failed", "blocked")}
        )
        print(f"not clean: {left} file(s) still need attention; see above", file=out)
    return report.exit_code


def print_survey(found: Survey, out: TextIO, cwd: str) -> None:
    def rel(path: str) -> str:
        return os.path.relpath(path, cwd)

    print(f"cachedoctor recover: {found.layout_line}" if found.layout_line else "cachedoctor recover", file=out)
    if found.empty:
        print(
            "nothing to recover: no temp files, no damaged recent writes, no held locks, no interrupted repair",
            file=out,
        )
        return
    if found.temp_files:
        print(f"temp files of interrupted writes: {len(found.temp_files)}", file=out)
        for f in found.temp_files:
            print(f"  {rel(f.path)} ({f.details.get('size', 0)} bytes)", file=out)
    if found.suspects:
        print(f"written {found.since}, read deep: {found.suspects} file(s); damaged: {len(found.damaged)}", file=out)
        for f in found.damaged:
            print(f"  {rel(f.path)}: {f.kind}: {f.message}", file=out)
    for lock in found.held_locks:
        print(f"lock held by a live process (a writer is active): {rel(lock)}", file=out)
    for root, run in found.interrupted:
        specs = " ".join(run.encoders) or "none"
        print(
            f"interrupted repair in {rel(root)}: run {run.run_id}, {len(run.verified)} item(s) finished, "
            f"{len(run.unfinished)} not; encoder(s): {specs}",
            file=out,
        )
