"""``cachedoctor repair`` and ``cachedoctor quarantine list|restore|purge``.

Kept apart from ``cli.py`` so that ``scan`` never pays for what repair imports (torch, the
encoders); the commands register on the same Typer app.
"""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from cachedoctor.cli import ConfigOption, FileTimeoutOption, LayoutOption, ModelFamilyOption, OutputDirOption, _ENV, app
from cachedoctor.errors import PathError
from cachedoctor.layouts import LayoutName
from cachedoctor.report import EXIT_COULD_NOT_RUN
from cachedoctor.report.text import human_size
from cachedoctor.report.repair_text import EXIT_NOT_CLEAN, EXIT_REPAIRED, print_plan, print_result, print_survey


# The options `repair` and `recover` share.
PathsArg = Annotated[Optional[list[str]], typer.Argument(help="Cache folders or files (kohya: the image folder).", show_default=False, metavar="PATH...")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing anything.")]
ManifestOption = Annotated[Optional[str], typer.Option("--manifest", help="A manifest naming each cache file's source.")]


@app.command()
def repair(
    ctx: typer.Context,
    paths: PathsArg = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Scan and show the plan; change nothing.")] = False,
    encoder: Annotated[Optional[list[str]], typer.Option("--encoder", help="NAME[:ARG] or module:factory[:ARG]; give one for images and one for captions.")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", min=1, help="One recompute worker per GPU (cuda:0..N-1).")] = None,
    device: Annotated[str, typer.Option("--device", help="Device for recompute workers without --gpus.")] = "cpu",
    workers: Annotated[int, typer.Option("--workers", "-j", min=1, help="Recompute worker processes on --device.")] = 1,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Items per encoder batch.")] = 8,
    only: Annotated[Optional[str], typer.Option("--only", help="Repair only findings of these kinds (comma-separated).")] = None,
    yes: YesOption = False,
    resume: Annotated[bool, typer.Option("--resume", help="Finish an interrupted repair (the default whenever one is found).")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Give up an interrupted repair and start a new run (its quarantine stays).")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Scan deep first: also repair bad CRCs and NaN/Inf.")] = False,
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    manifest: ManifestOption = None,
    model_family: ModelFamilyOption = None,
    output_dir: OutputDirOption = None,
    file_timeout: FileTimeoutOption = None,
) -> int:
    """Fix what scan finds: lossless rewrites, quarantine, and recompute through an encoder."""
    from cachedoctor.checks import CHECKS
    from cachedoctor.layouts import LayoutOptions
    from cachedoctor.repair.run import RepairOptions, still_broken

    env = _ENV.get()
    resolved = _resolved(ctx, paths, layout, config, manifest, file_timeout)
    if resolved is None:
        return EXIT_COULD_NOT_RUN
    targets, layout, config, manifest, file_timeout = resolved
    kinds = frozenset(k.strip() for k in only.split(",") if k.strip()) if only else None
    known = {c.kind for c in CHECKS}
    if kinds and kinds - known:
        env.error(f"--only: unknown kind(s) {', '.join(sorted(kinds - known))}; choose from {', '.join(sorted(known))}")
        return EXIT_COULD_NOT_RUN
    options = RepairOptions(deep=deep, encoders=tuple(encoder or ()), gpus=gpus, device=device, workers=workers,
                            batch_size=batch_size, only=kinds, dry_run=dry_run, fresh=fresh and not resume,
                            file_timeout=file_timeout)
    out = env.stdout

    outcome = _run(targets, layout, LayoutOptions(config=config, manifest=manifest, model_family=model_family,
                                                  output_dir=output_dir), options, yes)
    if isinstance(outcome, int):
        return outcome
    if dry_run:
        print("dry run: nothing was changed", file=out)
        return EXIT_NOT_CLEAN if outcome.plan.actions or outcome.plan.needs_person else EXIT_REPAIRED
    if not outcome.leader:
        return EXIT_REPAIRED
    return print_result(outcome, still_broken(outcome), out, env)


def _resolved(ctx: typer.Context, paths: list[str] | None, layout: LayoutName, config: str | None,
              manifest: str | None, file_timeout: float | None = None
              ) -> tuple[list[str], LayoutName, str | None, str | None, float] | None:
    """Targets, layout, config and manifest as ``scan`` resolves them (command line, then
    ``CACHEDOCTOR_*``, then ``[tool.cachedoctor]``), so a project's config serves every command;
    ``None`` after saying on stderr what is wrong."""
    from cachedoctor.cli_settings import resolve_settings

    settings = resolve_settings(_ENV.get(), ctx, paths=paths, layout=layout, config=config, manifest=manifest, fail_on=None,
                                file_timeout=file_timeout)
    if settings is None:
        return None
    config, manifest = settings.config.value, settings.manifest.value
    targets = _targets(list(settings.paths.value), config, manifest)
    if targets is None:
        return None
    return targets, LayoutName(settings.layout.value), config, manifest, settings.file_timeout.value


def _targets(paths: list[str] | None, config: str | None, manifest: str | None) -> list[str] | None:
    """Absolute targets, or ``None`` after saying on stderr what is missing."""
    env = _ENV.get()
    targets = [os.path.abspath(p) for p in paths or []]
    if not targets and not config and not manifest:
        env.error("no PATH given; name a cache folder, or pass --config multidatabackend.json or --manifest FILE")
        return None
    for target in targets:
        if not os.path.exists(target):
            env.error(f"{target}: no such file or folder; check the path (and that its disk is mounted)")
            return None
    return targets


def _run(targets: list[str], layout: LayoutName, layout_options, options, yes: bool):  # type: ignore[no-untyped-def]
    """Run the repair machinery with the plan printed and the question asked; the outcome, or
    the exit code when it could not run or the user said no."""
    from cachedoctor.repair.model import Declined
    from cachedoctor.repair.run import repair as run_repair

    env = _ENV.get()
    out = env.stdout

    def confirm(outcome) -> bool:  # type: ignore[no-untyped-def]
        go = yes or not env.stdin_isatty or _ask("Go ahead? [y/N] ", out)
        if go:  # from here on Ctrl-C leaves a journal the next run finishes
            env.interrupted = "interrupted; run the same command again to finish (the journal resumes it; nothing is lost)"
        return go

    try:
        return run_repair(targets, layout, layout_options, options, list(env.argv), confirm,
                          lambda outcome: print_plan(outcome, out))
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    except Declined:
        print("nothing was changed", file=out)
        return EXIT_NOT_CLEAN


def _ask(question: str, out) -> bool:  # type: ignore[no-untyped-def]
    import sys

    print(question, end="", file=out, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


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
        print(f"{run.run_id}: {len(run.files)} file(s), {human_size(run.size)}", file=env.stdout)
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
    try:
        done = restore(base, run, aside)
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
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
    if not yes and not (env.stdin_isatty and typer.confirm(f"Delete {len(run.files)} file(s), {human_size(run.size)}, for good?")):
        env.error(f"{run.folder}: not purged; pass --yes to delete it without asking")
        return EXIT_COULD_NOT_RUN
    print(f"purged {run_id}: {human_size(purge(run))} freed", file=env.stdout)
    return 0


@app.command()
def recover(
    ctx: typer.Context,
    paths: PathsArg = None,
    apply: Annotated[bool, typer.Option("--apply", help="Quarantine what is partial and resume the interrupted repair.")] = False,
    encoder: Annotated[Optional[list[str]], typer.Option("--encoder", help="For recomputes (default: the interrupted repair's own).")] = None,
    yes: YesOption = False,
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    manifest: ManifestOption = None,
    model_family: ModelFamilyOption = None,
    output_dir: OutputDirOption = None,
    file_timeout: FileTimeoutOption = None,
) -> int:
    """After a crash: find temp files, damaged recent writes, held locks and interrupted repairs."""
    from cachedoctor.layouts import LayoutOptions
    from cachedoctor.repair.recover import CRASH_KINDS, survey
    from cachedoctor.repair.run import RepairOptions, still_broken

    env = _ENV.get()
    out = env.stdout
    resolved = _resolved(ctx, paths, layout, config, manifest, file_timeout)
    if resolved is None:
        return EXIT_COULD_NOT_RUN
    targets, layout, config, manifest, file_timeout = resolved
    layout_options = LayoutOptions(config=config, manifest=manifest, model_family=model_family, output_dir=output_dir)
    try:
        found = survey(targets, layout, layout_options, file_timeout=file_timeout)
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    print_survey(found, out, env.cwd)
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
    options = RepairOptions(deep=True, encoders=encoders, only=None if resumed else CRASH_KINDS, file_timeout=file_timeout)
    print("", file=out)
    outcome = _run(targets, layout, layout_options, options, yes)
    if isinstance(outcome, int):
        return outcome
    return print_result(outcome, still_broken(outcome), out, env)
