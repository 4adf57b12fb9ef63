"""``cachedoctor repair`` and ``cachedoctor quarantine list|restore|purge``.

Kept apart from ``cli.py`` so that ``scan`` never pays for what repair imports (torch, the
encoders); the commands register on the same Typer app.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Annotated, Optional

import typer

from cachedoctor.cli import ConfigOption, LayoutOption, ModelFamilyOption, OutputDirOption, _ENV, app
from cachedoctor.errors import PathError
from cachedoctor.layouts import LayoutName
from cachedoctor.report import EXIT_COULD_NOT_RUN

EXIT_REPAIRED, EXIT_NOT_CLEAN = 0, 1


@app.command()
def repair(
    paths: Annotated[Optional[list[str]], typer.Argument(help="Cache folders or files (kohya: the image folder).", show_default=False, metavar="PATH...")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Scan and show the plan; change nothing.")] = False,
    encoder: Annotated[Optional[list[str]], typer.Option("--encoder", help="NAME[:ARG] or module:factory[:ARG]; give one for images and one for captions.")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", min=1, help="One recompute worker per GPU (cuda:0..N-1).")] = None,
    device: Annotated[str, typer.Option("--device", help="Device for recompute workers without --gpus.")] = "cpu",
    workers: Annotated[int, typer.Option("--workers", "-j", min=1, help="Recompute worker processes on --device.")] = 1,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Items per encoder batch.")] = 8,
    only: Annotated[Optional[str], typer.Option("--only", help="Repair only findings of these kinds (comma-separated).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing anything.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Finish an interrupted repair (the default whenever one is found).")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Give up an interrupted repair and start a new run (its quarantine stays).")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Scan deep first: also repair bad CRCs and NaN/Inf.")] = False,
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    manifest: Annotated[Optional[str], typer.Option("--manifest", help="A manifest naming each cache file's source.")] = None,
    model_family: ModelFamilyOption = None,
    output_dir: OutputDirOption = None,
) -> int:
    """Fix what scan finds: lossless rewrites, quarantine, and recompute through an encoder."""
    from cachedoctor.checks import CHECKS
    from cachedoctor.layouts import LayoutOptions
    from cachedoctor.repair.interface import Declined
    from cachedoctor.repair.runner import RepairOptions, repair as run_repair, still_broken

    env = _ENV.get()
    targets = [os.path.abspath(p) for p in paths or []]
    if not targets and not config and not manifest:
        env.error("no PATH given; name a cache folder, or pass --config multidatabackend.json or --manifest FILE")
        return EXIT_COULD_NOT_RUN
    kinds = frozenset(k.strip() for k in only.split(",") if k.strip()) if only else None
    known = {c.kind for c in CHECKS}
    if kinds and kinds - known:
        env.error(f"--only: unknown kind(s) {', '.join(sorted(kinds - known))}; choose from {', '.join(sorted(known))}")
        return EXIT_COULD_NOT_RUN
    for target in targets:
        if not os.path.exists(target):
            env.error(f"{target}: no such file or folder; check the path (and that its disk is mounted)")
            return EXIT_COULD_NOT_RUN
    options = RepairOptions(deep=deep, encoders=tuple(encoder or ()), gpus=gpus, device=device, workers=workers,
                            batch_size=batch_size, only=kinds, dry_run=dry_run, fresh=fresh and not resume)
    out = env.stdout

    def show_plan(outcome) -> None:  # type: ignore[no-untyped-def]
        _print_plan(outcome, out)

    def confirm(outcome) -> bool:  # type: ignore[no-untyped-def]
        go = yes or not env.stdin_isatty or _ask("Go ahead? [y/N] ", out)
        if go:  # from here on Ctrl-C leaves a journal the next run finishes
            env.interrupted = "interrupted; run the same command again to finish (the journal resumes it; nothing is lost)"
        return go

    try:
        outcome = run_repair(targets, layout, LayoutOptions(config=config, manifest=manifest, model_family=model_family,
                                                            output_dir=output_dir), options, list(env.argv), confirm, show_plan)
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    except Declined:
        print("nothing was changed", file=out)
        return EXIT_NOT_CLEAN
    if dry_run:
        print("dry run: nothing was changed", file=out)
        return EXIT_NOT_CLEAN if outcome.plan.actions or outcome.plan.needs_person else EXIT_REPAIRED
    if not outcome.leader:
        return EXIT_REPAIRED
    return _print_result(outcome, still_broken(outcome), out, env)


def _ask(question: str, out) -> bool:  # type: ignore[no-untyped-def]
    import sys

    print(question, end="", file=out, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def _print_plan(outcome, out) -> None:  # type: ignore[no-untyped-def]
    from cachedoctor.repair.interface import ActionKind

    result, plan = outcome.before, outcome.plan
    mode = "deep" if result.options.deep else "quick"
    files = len({f.path for f in result.findings})
    print(f"cachedoctor repair: {result.stats.files_read} files scanned ({mode}), {len(result.findings)} finding(s) in {files} file(s)", file=out)
    if outcome.layout_line:
        print(outcome.layout_line, file=out)
    if outcome.interrupted is not None:
        gone = outcome.interrupted
        print(f"resuming interrupted run {gone.run_id}: {len(gone.verified)} item(s) were finished before it stopped, "
              f"{len(gone.unfinished)} were not; this scan shows what is still to do", file=out)
    if not plan.actions and not plan.needs_person:
        print("nothing to repair", file=out)
        return
    print("plan:", file=out)
    for label, count in plan.counts().items():
        if label == "blocked":
            continue
        extra = f" ({_size(plan.rewrite_bytes(ActionKind(label)))} to rewrite)" if label in ("rewrite-cpu", "clone-storage") else ""
        print(f"  {label:<14} {count} file(s){extra}", file=out)
    blocked = Counter(a.blocked for a in plan.actions if a.blocked)
    for why, count in blocked.most_common():
        print(f"  {'cannot fix':<14} {count} file(s): {why}", file=out)
    if plan.needs_person:
        print(f"  {'needs a person':<14} {len(plan.needs_person)} file(s): two dataset items map to one file; rename all but one", file=out)


def _print_result(outcome, broken: list[str], out, env) -> int:  # type: ignore[no-untyped-def]
    from cachedoctor.repair.interface import ItemState

    states = Counter(r.state.value for r in outcome.results)
    print("done: " + ", ".join(f"{states.get(s.value, 0)} {s.value}" for s in
                               (ItemState.VERIFIED, ItemState.SKIPPED, ItemState.BLOCKED, ItemState.FAILED)), file=out)
    for r in outcome.results:
        if r.state in (ItemState.FAILED,):
            print(f"  failed: {os.path.relpath(r.path, env.cwd)}: {r.message}", file=out)
    for problem in outcome.problems:
        print(f"  worker: {problem}", file=out)
    moved = sorted({a.root for a in outcome.plan.actions} & {a.root for a in outcome.plan.actions if not a.blocked})
    if any(r.quarantined for r in outcome.results):
        for root in moved:
            print(f"quarantine: {os.path.join(root, '.cachedoctor', 'quarantine', outcome.run_id)} "
                  f"(undo: cachedoctor quarantine restore {outcome.run_id} {root})", file=out)
    if outcome.after is not None:
        before, after = Counter(f.kind for f in outcome.before.findings), Counter(f.kind for f in outcome.after.findings)
        changes = [f"{k} {before.get(k, 0)} -> {after.get(k, 0)}" for k in sorted(set(before) | set(after))]
        print("before -> after: " + (", ".join(changes) if changes else "clean"), file=out)
    clean = (not broken and not states.get("failed") and not states.get("blocked") and not outcome.problems
             and not outcome.plan.needs_person)
    if clean:
        print("repaired: the rescan is clean of what was repaired", file=out)
    else:
        left = len(set(broken) | set(outcome.plan.needs_person) | {r.path for r in outcome.results if r.state.value in ("failed", "blocked")})
        print(f"not clean: {left} file(s) still need attention; see above", file=out)
    return EXIT_REPAIRED if clean else EXIT_NOT_CLEAN


quarantine_app = typer.Typer(help="List, restore or purge what repair moved aside.", no_args_is_help=True)
app.add_typer(quarantine_app, name="quarantine")
RootArg = Annotated[str, typer.Argument(help="The cache root (the folder holding .cachedoctor/).", metavar="CACHE_ROOT")]


@quarantine_app.command("list")
def quarantine_list(root: RootArg = ".") -> int:
    """Every repair run's quarantine under CACHE_ROOT: files, sizes, why."""
    from cachedoctor.repair.quarantine import list_runs

    env = _ENV.get()
    runs = list_runs(os.path.abspath(root))
    if not runs:
        print(f"no quarantine under {root}", file=env.stdout)
        return 0
    for run in runs:
        print(f"{run.run_id}: {len(run.files)} file(s), {_size(run.size)}", file=env.stdout)
        for item in run.files:
            why = ",".join(item.reasons) or "no record"
            print(f"  {item.relpath}  [{item.action}: {why}]", file=env.stdout)
    return 0


def _find_run(root: str, run_id: str):  # type: ignore[no-untyped-def]
    """``(absolute root, the run)``, or ``(root, None)`` after saying so on stderr."""
    from cachedoctor.repair.quarantine import find_run

    base = os.path.abspath(root)
    run = find_run(base, run_id)
    if run is None:
        _ENV.get().error(f"{base}: no quarantine run {run_id!r}; see `cachedoctor quarantine list {root}`")
    return base, run


@quarantine_app.command("restore")
def quarantine_restore(run_id: Annotated[str, typer.Argument(metavar="RUN")], root: RootArg = ".") -> int:
    """Put RUN's files back; what is there now is quarantined first, so nothing is lost."""
    from cachedoctor.repair.journal import new_run_id
    from cachedoctor.repair.quarantine import restore

    env = _ENV.get()
    base, run = _find_run(root, run_id)
    if run is None:
        return EXIT_COULD_NOT_RUN
    aside = f"restore-{new_run_id()}"
    done = restore(base, run, aside)
    print(f"restored {len(done)} file(s) from {run_id}; the files they replaced are in quarantine run {aside}", file=env.stdout)
    return 0


@quarantine_app.command("purge")
def quarantine_purge(run_id: Annotated[str, typer.Argument(metavar="RUN")], root: RootArg = ".",
                     yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False) -> int:
    """Delete RUN's quarantine for good (the only command that deletes data)."""
    from cachedoctor.repair.quarantine import purge

    env = _ENV.get()
    _base, run = _find_run(root, run_id)
    if run is None:
        return EXIT_COULD_NOT_RUN
    if not yes and not (env.stdin_isatty and typer.confirm(f"Delete {len(run.files)} file(s), {_size(run.size)}, for good?")):
        env.error(f"{run.folder}: not purged; pass --yes to delete it without asking")
        return EXIT_COULD_NOT_RUN
    print(f"purged {run_id}: {_size(purge(run))} freed", file=env.stdout)
    return 0


@app.command()
def recover(
    paths: Annotated[Optional[list[str]], typer.Argument(help="Cache folders (kohya: the image folder).", show_default=False, metavar="PATH...")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Quarantine what is partial and resume the interrupted repair.")] = False,
    encoder: Annotated[Optional[list[str]], typer.Option("--encoder", help="For recomputes (default: the interrupted repair's own).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing anything.")] = False,
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    manifest: Annotated[Optional[str], typer.Option("--manifest", help="A manifest naming each cache file's source.")] = None,
    model_family: ModelFamilyOption = None,
    output_dir: OutputDirOption = None,
) -> int:
    """After a crash: find temp files, damaged recent writes, held locks and interrupted repairs."""
    from cachedoctor.layouts import LayoutOptions
    from cachedoctor.repair.interface import Declined
    from cachedoctor.repair.recover import CRASH_KINDS, survey
    from cachedoctor.repair.runner import RepairOptions, repair as run_repair, still_broken

    env = _ENV.get()
    out = env.stdout
    targets = [os.path.abspath(p) for p in paths or []]
    if not targets and not config and not manifest:
        env.error("no PATH given; name a cache folder, or pass --config multidatabackend.json or --manifest FILE")
        return EXIT_COULD_NOT_RUN
    for target in targets:
        if not os.path.exists(target):
            env.error(f"{target}: no such file or folder; check the path (and that its disk is mounted)")
            return EXIT_COULD_NOT_RUN
    layout_options = LayoutOptions(config=config, manifest=manifest, model_family=model_family, output_dir=output_dir)
    try:
        found = survey(targets, layout, layout_options)
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    _print_survey(found, out, env.cwd)
    if found.empty or not apply:
        if not found.empty:
            print("`cachedoctor recover --apply` with the same arguments quarantines what is partial"
                  + (" and resumes the interrupted repair" if found.interrupted else ""), file=out)
        return EXIT_REPAIRED if found.empty else EXIT_NOT_CLEAN
    if found.held_locks:
        env.error(f"{found.held_locks[0]}: a running process holds this lock (a writer is still active); "
                  "stop it or let it finish, then recover")
        return EXIT_COULD_NOT_RUN
    resumed = found.interrupted[0][1] if found.interrupted else None
    encoders = tuple(encoder or ()) or (resumed.encoders if resumed else ())
    options = RepairOptions(deep=True, encoders=encoders, only=None if resumed else CRASH_KINDS)
    print("", file=out)
    try:
        outcome = run_repair(targets, layout, layout_options, options, list(env.argv),
                             lambda o: yes or not env.stdin_isatty or _ask("Go ahead? [y/N] ", out),
                             lambda o: _print_plan(o, out))
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    except Declined:
        print("nothing was changed", file=out)
        return EXIT_NOT_CLEAN
    return _print_result(outcome, still_broken(outcome), out, env)


def _print_survey(found, out, cwd: str) -> None:  # type: ignore[no-untyped-def]
    def rel(path: str) -> str:
        return os.path.relpath(path, cwd)

    print(f"cachedoctor recover: {found.layout_line}" if found.layout_line else "cachedoctor recover", file=out)
    if found.empty:
        print("nothing to recover: no temp files, no damaged recent writes, no held locks, no interrupted repair",
              file=out)
        return
    if found.temp_files:
        print(f"temp files of interrupted writes: {len(found.temp_files)}", file=out)
        for f in found.temp_files:
            print(f"  {rel(f.path)} ({f.details.get('size', 0)} bytes)", file=out)
    if found.suspects:
        print(f"written around the crash, read deep: {found.suspects} file(s); damaged: {len(found.damaged)}", file=out)
        for f in found.damaged:
            print(f"  {rel(f.path)}: {f.kind}: {f.message}", file=out)
    for lock in found.held_locks:
        print(f"lock held by a live process (a writer is active): {rel(lock)}", file=out)
    for root, run in found.interrupted:
        specs = " ".join(run.encoders) or "none"
        print(f"interrupted repair in {rel(root)}: run {run.run_id}, {len(run.verified)} item(s) finished, "
              f"{len(run.unfinished)} not; encoder(s): {specs}", file=out)
