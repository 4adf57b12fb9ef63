"""The plan ``repair`` shows before it asks (and all ``--dry-run`` shows): per action, how many
files and which, with the finding kinds behind each.

A count line per action (the same with ``-q``, which prints nothing else), then up to
:data:`~cachedoctor.report.repair_lines.LIMIT` of its files (all with ``-v``). Files that need a
recompute but cannot have one here are grouped by the reason: quarantined in its place when the
trainer cannot load them (it re-caches them), otherwise left as they are ("cannot fix").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from cachedoctor.report.repair_lines import Lines, whole
from cachedoctor.report.text import human_size

if TYPE_CHECKING:  # type-only: printing a plan must not import the repair machinery
    from cachedoctor.cli.environment import Environment
    from cachedoctor.repair.run import RepairOutcome

#: Why a name collision is left to a person (the plan's and the result's words).
NEEDS_PERSON = "two dataset items map to one file; rename all but one"
#: Continuation lines of a count line start under its text, after the 14-column label.
_UNDER_LABEL = " " * 15


def print_plan(outcome: RepairOutcome, env: Environment) -> None:
    from cachedoctor.repair.model import ActionKind

    lines = Lines(env)
    result, plan = outcome.before, outcome.plan
    mode = "deep" if result.options.deep else "quick"
    files = len({f.path for f in result.findings})
    lines.say(
        f"cachedoctor repair: {result.stats.files_read} files scanned ({mode}), "
        f"{len(result.findings)} finding(s) in {files} file(s)"
    )
    if outcome.layout_line:
        lines.say(outcome.layout_line)
    for note in getattr(outcome, "notes", ()):
        lines.say(f"note: {note}")
    if outcome.interrupted is not None:
        gone = outcome.interrupted
        lines.say(
            f"resuming interrupted run {gone.run_id}: {len(gone.verified)} item(s) were finished before it "
            f"stopped, {len(gone.unfinished)} were not; this scan shows what is still to do"
        )
    for finding in run_level(result.findings):  # no file to act on, but what to change before training
        lines.say(f"{finding.severity.value}: {finding.kind}: {lines.rel(finding.path)}: {finding.message}", "  ")
    if not plan.actions and not plan.needs_person:
        lines.say("nothing to repair")
        return
    lines.say("plan:")
    for label, count in plan.counts().items():
        if label == "blocked":
            continue
        extra = (
            f" ({whole(human_size(plan.rewrite_bytes(ActionKind(label))))} to rewrite)"
            if label in ("rewrite-cpu", "clone-storage")
            else ""
        )
        lines.say(f"  {label:<14} {count} file(s){extra}", _UNDER_LABEL)
        group = [a for a in plan.actions if not a.blocked and a.kind.value == label]
        if label == "drop-items":  # an index cut before its first bad item: the trainer re-caches the rest
            lines.files([f"{_entry(lines, a)} ({_cut(a.note)})" for a in group], "    ")
            lines.say("    the trainer re-caches the dropped items when it next runs", "    ")
            continue
        lines.files([_entry(lines, a) for a in group if not a.note], "    ")
        instead = Counter(a.note for a in group if a.note)
        for why, n in instead.most_common():
            lines.say(f"    {n} of them not recomputed ({why}): the trainer re-caches them", "    ")
            lines.files([_entry(lines, a) for a in group if a.note == why], "      ")
    blocked = Counter(a.blocked for a in plan.actions if a.blocked)
    for why, n in blocked.most_common():
        lines.say(f"  {'cannot fix':<14} {n} file(s): {why}", _UNDER_LABEL)
        lines.files([_entry(lines, a) for a in plan.actions if a.blocked == why], "    ")
    if plan.needs_person:
        lines.say(f"  {'needs a person':<14} {len(plan.needs_person)} file(s): {NEEDS_PERSON}", _UNDER_LABEL)
        sources = _collisions(result.findings)
        lines.files(
            [
                f"{lines.rel(p)}: name-collision ({', '.join(lines.rel(s) for s in sources[p])})"
                for p in plan.needs_person
            ],
            "    ",
        )


def run_level(findings: list[Any]) -> list[Any]:
    """Findings no repair acts on that are about the run, not a file (a setting that loses the
    cache, ranks that would get unequal steps): repair says them, since a trainer who repairs
    before a run never sees the scan's report."""
    return [f for f in findings if f.fix.value == "none" and f.kind != "name-collision"]


def _cut(note: str | None) -> str:
    """Where a diffusion-pipe index is cut: before the first item the scan flagged at the latest
    (the repair reads every item again and may find an earlier damaged one)."""
    from cachedoctor.repair.planner import UNREADABLE_INDEX_NOTE
    from cachedoctor.repair.shards import flagged_items

    if note == UNREADABLE_INDEX_NOTE:
        return "its index does not read: it and its shards go to the quarantine"
    items = flagged_items(note)
    return f"cut before item {min(items)} at the latest" if items else "cut before its first damaged item"


def _entry(lines: Lines, action: Any) -> str:
    return f"{lines.rel(action.path)}: {', '.join(action.reasons)}"


def _collisions(findings: list[Any]) -> dict[str, list[str]]:
    """Per colliding file, the dataset items that map to it."""
    out: dict[str, list[str]] = defaultdict(list)
    for f in findings:
        if f.kind == "name-collision":
            out[f.path] = list(f.details.get("sources") or ([f.source] if f.source else []))
    return out


__all__ = ["NEEDS_PERSON", "print_plan", "run_level"]
