"""What ``recover`` prints about a crash: temp files, files read deep because they were written
around it (and how many of *those* are damaged), damage the last scan had already recorded,
held locks and interrupted repairs. Every count names exactly the files it counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.report.repair_lines import Lines, whole

if TYPE_CHECKING:  # type-only: printing must not import the repair machinery
    from cachedoctor.cli.environment import Environment
    from cachedoctor.repair.journal import Interrupted
    from cachedoctor.repair.recover import Survey


def print_survey(found: Survey, env: Environment) -> None:
    lines = Lines(env)
    lines.say(f"cachedoctor recover: {found.layout_line}" if found.layout_line else "cachedoctor recover")
    if found.empty:
        lines.say("nothing to recover: no temp files, no damaged recent writes, no held locks, no interrupted repair")
        return
    if found.temp_files:
        lines.say(f"temp files of interrupted writes: {len(found.temp_files)}")
        lines.files(
            [f"{lines.rel(f.path)} ({f.details.get('size', 0)} bytes)" for f in found.temp_files], "  ", findings=True
        )
    for read in found.reads:
        if not read.files and not read.damaged:
            continue
        hurt = len({f.path for f in read.damaged})
        verdict = f"{hurt} of them damaged:" if hurt else "none damaged"
        lines.say(f"written {read.since}: {whole(f'{read.files} file(s)')} read deep, {verdict}")
        lines.files([f"{lines.rel(f.path)}: {f.kind}: {f.message}" for f in read.damaged], "  ", findings=True)
    if found.known_damaged:
        known = len({f.path for f in found.known_damaged})
        lines.say(
            f"recorded as damaged by the last scan (unchanged since, not read again): {whole(f'{known} file(s)')}"
        )
        lines.files([f"{lines.rel(f.path)}: {f.kind}: {f.message}" for f in found.known_damaged], "  ", findings=True)
    for lock in found.held_locks:
        lines.say(f"lock held by a live process (a writer is active): {lines.rel(lock)}")
    for lock in found.stale_locks:
        lines.say(f"lock left by a repair whose process is gone (--apply clears it): {lines.rel(lock)}")
    for root, run in found.interrupted:
        specs = " ".join(run.encoders) or "none"
        lines.say(
            f"interrupted repair in {lines.rel(root)}: run {run.run_id}, {len(run.verified)} item(s) finished, "
            f"{len(run.unfinished)} not; encoder(s): {specs}"
        )
        lines.say(f"  --apply resumes it with its own scope: {scope_words(run)}")


def scope_words(run: Interrupted) -> str:
    """What the interrupted run was asked to repair, as ``recover --apply`` will resume it."""
    if run.scope is None:  # a journal written before runs recorded their scope
        return "not recorded by that run's journal; only crash damage is repaired"
    only = run.only
    words = f"--only {','.join(sorted(only))}" if only is not None else "every finding kind"
    return words + (", --keep-blocked" if run.keep_blocked else "")


__all__ = ["print_survey", "scope_words"]
