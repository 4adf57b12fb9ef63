"""What ``repair`` and ``recover`` print after the work: the outcome, and what is left and why.

:class:`RepairReport` owns their exit code, as :class:`~cachedoctor.report.outcome.ScanReport`
owns the scan's: CLEAN when everything planned was done, verified and the rescan is clean of it
(or, for a dry run or a survey, when there is nothing to do); FINDINGS otherwise. It also says,
once for the text and the JSON document alike, which files still need attention and why
(:meth:`RepairReport.left`), and what to do next. The plan is printed by
``repair_plan_text.py``, the crash survey by ``repair_survey_text.py``, the JSON document built
by ``repair_json.py``.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachedoctor.exit_status import ExitStatus
from cachedoctor.report import write_check
from cachedoctor.report.repair_lines import LIMIT, Lines, whole
from cachedoctor.report.repair_plan_text import NEEDS_PERSON, print_plan, run_level
from cachedoctor.report.repair_survey_text import print_survey
from cachedoctor.statedir import quarantine_root

if TYPE_CHECKING:  # type-only: printing a report must not import the repair machinery
    from cachedoctor.cli.environment import Environment

#: Why a file is left, in the order they are listed: ``state`` -> how the text says it.
LEFT_STATES = {
    "failed": "failed",
    "blocked": "cannot fix",
    "needs-person": "needs a person",
    "re-cache": "left to the trainer",
    "found-again": "still found",
    "changed": "changed by another writer",
}
#: An object another writer changed during the repair: the rescan's finding in it is theirs.
CHANGED_ELSEWHERE = "during the repair: neither the version it scanned nor the one it wrote; the next scan judges it"
#: A file quarantined because it could not be recomputed here: its gap is the plan's, not a failure.
RE_CACHE = "moved to the quarantine, not recomputed: the trainer re-caches it"
#: What a diffusion-pipe index cut before its first bad item leaves (``repair/shards.py``).
RE_CACHE_ITEMS = "its index now ends before its first bad item: the trainer re-caches the dropped items"


@dataclass(frozen=True)
class Leftover:
    """A file the run leaves needing attention: ``state`` is a key of :data:`LEFT_STATES`;
    ``message`` says why (the blocked reason, the failure, the finding the rescan still shows)."""

    path: str
    kinds: tuple[str, ...]
    state: str
    message: str


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
        """Items per state. A blocked action counts as blocked even where nothing ran (no item
        of the plan was runnable, so none was recorded)."""
        if self.outcome is None:
            return Counter()
        states = Counter(r.state.value for r in self.outcome.results)
        if not self.dry_run:
            recorded = {r.path for r in self.outcome.results}
            states["blocked"] += sum(1 for a in self.outcome.plan.actions if a.blocked and a.path not in recorded)
        return +states

    @property
    def run_errors(self) -> list[Any]:
        """Errors about the run that no repair of a file cures (``rank-imbalance``)."""
        if self.outcome is None:
            return []
        return [f for f in run_level(self.outcome.before.findings) if f.severity.value == "error"]

    @property
    def clean(self) -> bool:
        if self.declined:
            return False
        if self.outcome is None:
            return self.survey is None or self.survey.empty
        plan = self.outcome.plan
        if self.run_errors:  # a run that would hang or not start: `repair && launch` must not launch
            return False
        if self.dry_run:
            return not (plan.actions or plan.needs_person)
        if not self.outcome.leader:  # the leader rank judges the run
            return True
        states = self.states
        return (
            not self.broken
            and not self.others_found()
            and not states.get("failed")
            and not states.get("blocked")
            and not self.outcome.problems
            and not plan.needs_person
        )

    @property
    def worse(self) -> dict[str, tuple[int, int]]:
        """Finding kinds with more files after the repair than before: ``kind -> (before, after)``.
        Never expected (each write is judged first; ``write_check.py`` says when it can be);
        reported, and not clean, if it happens."""
        if self.outcome is None or self.outcome.after is None or self.dry_run:
            return {}
        # A file the plan quarantined in place of a recompute is missing now by design (the plan
        # said so: the trainer re-caches it); that is not a repair gone wrong.
        moved = {
            r.path
            for r in self.outcome.results
            if (r.quarantined and r.kind.value == "quarantine") or r.kind.value == "drop-items"
        }
        others = self.others  # what another writer changed meanwhile is not the repair's doing
        before = Counter(k for k, p in {(f.kind, f.path) for f in self.outcome.before.findings} if p not in others)
        after = Counter(
            k
            for k, p in {(f.kind, f.path) for f in self.outcome.after.findings}
            if not (k == "missing-entry" and p in moved) and p not in others
        )
        return {k: (before[k], n) for k, n in sorted(after.items()) if n > before[k]}

    @property
    def others(self) -> set[str]:
        """Objects another writer changed during the repair (``RepairOutcome.others``)."""
        return set(getattr(self.outcome, "others", None) or ())

    def others_found(self) -> list[str]:
        """Objects another writer changed that the rescan finds wanting (not clean, not ours)."""
        after = self.outcome.after if self.outcome is not None else None
        return sorted({f.path for f in after.findings if f.path in self.others}) if after is not None else []

    @property
    def exit_code(self) -> ExitStatus:
        return ExitStatus.CLEAN if self.clean and not self.worse else ExitStatus.FINDINGS

    def left(self) -> list[Leftover]:
        """Every file the run leaves needing attention, once, failures first."""
        outcome = self.outcome
        if outcome is None or self.dry_run or self.declined:
            return []
        after: dict[str, list[Any]] = defaultdict(list)
        for f in outcome.after.findings if outcome.after is not None else ():
            after[f.path].append(f)
        before: dict[str, set[str]] = defaultdict(set)
        for f in outcome.before.findings:
            before[f.path].add(f.kind)
        reasons = {a.path: a.reasons for a in outcome.plan.actions}
        instead = {a.path for a in outcome.plan.actions if a.note and a.kind.value == "quarantine"}
        cut = {a.path for a in outcome.plan.actions if a.kind.value == "drop-items"}
        out: dict[str, Leftover] = {}
        for r in outcome.results:
            if r.state.value in ("failed", "blocked"):
                out[r.path] = Leftover(r.path, reasons.get(r.path, ()), r.state.value, r.message)
        for a in outcome.plan.actions:
            if a.blocked and a.path not in out:
                out[a.path] = Leftover(a.path, a.reasons, "blocked", a.blocked)
        for path in outcome.plan.needs_person:
            out[path] = Leftover(path, tuple(sorted(before[path])), "needs-person", NEEDS_PERSON)
        for path in list(self.broken) + self.others_found():
            if path not in out and after[path]:
                kinds = tuple(sorted({f.kind for f in after[path]}))
                if path in self.others:
                    out[path] = Leftover(path, kinds, "changed", CHANGED_ELSEWHERE)
                elif path in instead and kinds == ("missing-entry",):
                    out[path] = Leftover(path, kinds, "re-cache", RE_CACHE)
                elif path in cut and kinds == ("missing-entry",):
                    out[path] = Leftover(path, kinds, "re-cache", RE_CACHE_ITEMS)
                else:
                    out[path] = Leftover(path, kinds, "found-again", after[path][0].message)
        order = list(LEFT_STATES)
        return sorted(out.values(), key=lambda x: (order.index(x.state), x.path))

    def next_step(self, left: list[Leftover]) -> str | None:
        """What to do about what is left, in one sentence (``None`` when nothing is)."""
        states = {x.state for x in left}
        steps = []
        if "failed" in states:
            steps.append("a failed item changed nothing: remove its cause (the message says it)")
        if "blocked" in states:
            steps.append("give repair what each file that it cannot fix lacks (the reason says it)")
        if "needs-person" in states:
            steps.append("rename all but one of the files two dataset items share")
        if steps:
            steps[-1] += ", then run the same command again"
        if "re-cache" in states:
            steps.append("the trainer re-caches what was quarantined or dropped when it next runs")
        if "changed" in states:
            steps.append("find the other writer (a trainer still caching?) before repairing again")
        if "found-again" in states:
            steps.append("`cachedoctor explain KIND` says what else can be done about a kind still found")
        return "; ".join(steps) or None

    def _moved_roots(self) -> list[str]:
        """The cache roots this run moved files out of, into their quarantine."""
        if self.outcome is None:
            return []
        kept = {r.path for r in self.outcome.results if r.quarantined}
        return sorted({a.root for a in self.outcome.plan.actions if a.path in kept})

    def quarantine_dirs(self) -> list[str]:
        """The quarantine folders this run moved files into (one per cache root)."""
        return [os.path.join(quarantine_root(root), self.outcome.run_id) for root in self._moved_roots()]

    def undo(self) -> str | None:
        """The one command that puts back everything this run moved (one run id across every root)."""
        roots = self._moved_roots()
        if not roots:
            return None
        return f"cachedoctor quarantine restore {self.outcome.run_id} " + " ".join(shlex.quote(r) for r in roots)

    def before_after(self) -> dict[str, tuple[int, int]] | None:
        """Findings per kind before and after the repair (``None`` without a rescan)."""
        outcome = self.outcome
        if outcome is None or outcome.after is None or self.dry_run:
            return None
        before = Counter(f.kind for f in outcome.before.findings)
        after = Counter(f.kind for f in outcome.after.findings)
        return {k: (before.get(k, 0), after.get(k, 0)) for k in sorted(set(before) | set(after))}


def print_result(report: RepairReport, env: Environment) -> ExitStatus:
    """The outcome of a repair that ran, and what is left; returns the exit code."""
    lines = Lines(env)
    outcome, states = report.outcome, report.states
    lines.say(
        "done: " + ", ".join(f"{states.get(s, 0)} {s}" for s in ("verified", "skipped", "blocked", "failed")),
        indent="      ",
    )
    for problem in outcome.problems:
        lines.say(f"  worker: {problem}")
    for folder in report.quarantine_dirs():
        lines.say(f"quarantine: {whole(folder)}")
    undo = report.undo()
    if undo:
        lines.command("undo:", undo)
    changes = report.before_after()
    if changes is not None:
        text = ", ".join(whole(f"{k} {was} -> {now}") for k, (was, now) in changes.items())
        lines.say("before -> after: " + (text or "clean"), indent="                 ")
    unjudged = write_check.unjudged(outcome)
    if unjudged:
        path, why = unjudged[0]
        more = f" (and {len(unjudged) - 1} more)" if len(unjudged) > 1 else ""
        lines.say(f"not judged: {lines.rel(path)}{more} against its peers' scale: {why.split(': ', 1)[-1]}")
    for kind, (was, now) in report.worse.items():
        lines.say(f"worse: {kind} in {now} file(s), {was} before the repair{write_check.worse_why(kind, unjudged)}")
    if report.others:
        lines.say(f"changed by another writer during the repair (not by this one): {len(report.others)} object(s)")
    if report.clean and not report.worse:
        lines.say("repaired: the rescan is clean of what was repaired")
        return report.exit_code
    left = report.left()
    if not left:
        lines.say("not clean: the run did not finish cleanly; see above")
        return report.exit_code
    lines.say(f"not clean: {len(left)} file(s) still need attention:")  # -q too: this is the result
    _print_left(lines, left)
    step = report.next_step(left)
    if step:
        lines.say(f"next: {step}", indent="      ")
    return report.exit_code


def _print_left(lines: Lines, left: list[Leftover]) -> None:
    """What is left, grouped by why (a reason shared by many files is said once), at most
    :data:`LIMIT` groups of at most :data:`LIMIT` files each unless ``-v``."""
    groups: dict[tuple[str, str], list[Leftover]] = defaultdict(list)
    for x in left:
        groups[(x.state, x.message)].append(x)
    ordered = list(groups.items())
    shown = ordered if lines.verbose else ordered[:LIMIT]
    for (state, message), items in shown:
        lines.say(f"  {LEFT_STATES[state]}: {message}", "    ")
        lines.files([f"{lines.rel(x.path)}: {', '.join(x.kinds)}" for x in items], "    ", findings=True)
    rest = sum(len(items) for _, items in ordered[len(shown) :])
    if rest:
        lines.say(f"  ... and {rest} more file(s) (-v lists all)")


__all__ = ["LEFT_STATES", "Leftover", "RepairReport", "print_plan", "print_result", "print_survey"]
