"""``cachedoctor quarantine list|restore|purge``: what repair moved aside, and the way back.

``list`` only reads the quarantine's folders and records: it imports no scan, layout or reader.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from cachedoctor.cli.environment import current
from cachedoctor.errors import PathError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.text import human_size

if TYPE_CHECKING:
    from cachedoctor.repair.quarantine import QuarantineRun

quarantine_app = typer.Typer(help="List, restore or purge what repair moved aside.", no_args_is_help=True)
RootArg = Annotated[
    str, typer.Argument(help="The cache root (the folder holding .cachedoctor/).", metavar="CACHE_ROOT")
]
RunArg = Annotated[str, typer.Argument(metavar="RUN")]


@quarantine_app.command("list")
def quarantine_list(root: RootArg = ".") -> int:
    """Every repair run's quarantine under CACHE_ROOT: files, sizes, why."""
    from cachedoctor.repair.quarantine import list_runs

    out = current().stdout
    base = os.path.abspath(root)
    if not os.path.isdir(base):
        what = "is a file" if os.path.exists(base) else "no such folder"
        raise PathError(base, f"{what}; name the cache folder a repair ran on (its quarantine is in .cachedoctor/)")
    runs = list_runs(base)
    if not runs:
        print(f"no quarantine under {root}", file=out)
        return ExitStatus.CLEAN
    for run in runs:
        print(f"{run.run_id}: {len(run.files)} file(s), {human_size(run.size)}", file=out)
        for item in run.files:
            why = ",".join(item.reasons) or "no record"
            print(f"  {item.relpath}  [{item.action}: {why}]", file=out)
    return ExitStatus.CLEAN


def _find_run(root: str, run_id: str) -> tuple[str, QuarantineRun]:
    """``(absolute root, the run)``; a run that is not there is a :class:`PathError`."""
    from cachedoctor.repair.quarantine import find_run

    base = os.path.abspath(root)
    run = find_run(base, run_id)
    if run is None:
        raise PathError(base, f"no quarantine run {run_id!r}; see `cachedoctor quarantine list {root}`")
    return base, run


RootsArg = Annotated[
    list[str] | None,
    typer.Argument(help="The cache roots (folders holding .cachedoctor/); default: here.", metavar="CACHE_ROOT..."),
]


@quarantine_app.command("restore")
def quarantine_restore(
    run_id: RunArg,
    roots: RootsArg = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config", metavar="PATH", help="A SimpleTuner config: restore RUN in each of its cache folders."
        ),
    ] = None,
) -> int:
    """Put RUN's files back in every root that holds it (one repair run is one RUN across all its
    cache roots); what is there now is quarantined first, so nothing is lost."""
    from cachedoctor.repair.journal import new_run_id
    from cachedoctor.repair.quarantine import find_run, restore

    bases = [os.path.abspath(r) for r in (roots or ([] if config else ["."]))]
    if config:
        bases += _config_roots(config)
    found = [(base, run) for base in dict.fromkeys(bases) if (run := find_run(base, run_id)) is not None]
    if not found:
        where = " ".join(bases)
        raise PathError(where, f"no quarantine run {run_id!r} here; see `cachedoctor quarantine list CACHE_ROOT`")
    aside = f"restore-{new_run_id()}"
    done = [path for base, run in found for path in restore(base, run, aside)]
    print(
        f"restored {len(done)} file(s) from {run_id} in {len(found)} cache root(s); "
        f"the files they replaced are in quarantine run {aside}",
        file=current().stdout,
    )
    return ExitStatus.CLEAN


def _config_roots(config: str) -> list[str]:
    """The cache folders a SimpleTuner config names (where its repairs keep their quarantines)."""
    from cachedoctor.layouts import LayoutName, LayoutOptions, plan_for

    plan, _line = plan_for(LayoutName("simpletuner"), [], LayoutOptions(config=os.path.abspath(config)))
    return [] if plan is None else [os.path.abspath(r) for r in plan.roots]


@quarantine_app.command("purge")
def quarantine_purge(
    run_id: RunArg, root: RootArg = ".", yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False
) -> int:
    """Delete RUN's quarantine for good (the only command that deletes data)."""
    from cachedoctor.repair.quarantine import purge

    env = current()
    _base, run = _find_run(root, run_id)
    if not yes and not (
        env.stdin_isatty and env.ask(f"Delete {len(run.files)} file(s), {human_size(run.size)}, for good? [y/N] ")
    ):
        raise PathError(run.folder, "not purged; pass --yes to delete it without asking")
    print(f"purged {run_id}: {human_size(purge(run))} freed", file=env.stdout)
    return ExitStatus.CLEAN


__all__ = ["quarantine_app", "quarantine_list", "quarantine_purge", "quarantine_restore"]
