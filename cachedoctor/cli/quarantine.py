"""``cachedoctor quarantine list|restore|purge``: what repair moved aside, and the way back.

Each takes what ``scan`` and ``repair`` take (cache folders, files, kohya image folders, or the
dataset's ``--config``, ``--kohya-config`` or ``--manifest``) and finds every quarantine run at
or below them (``repair/quarantine_search.py``). ``list`` only reads the quarantine's folders
and records: it imports no scan, layout or reader (a dataset option reads its description).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from cachedoctor.cli.environment import current
from cachedoctor.cli.option_groups import DescriptionOptions, S3Options, TrainerPathOptions, with_option_groups
from cachedoctor.errors import PathError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.text import human_size

if TYPE_CHECKING:
    from cachedoctor.repair.quarantine import QuarantineRun
    from cachedoctor.repair.quarantine_search import Prefix, Search
    from cachedoctor.stores.s3 import S3Settings

quarantine_app = typer.Typer(help="List, restore or purge what repair moved aside.", no_args_is_help=True)
PathsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="What the repair was given (cache folders, files, image folders); every quarantine at or "
        "below them is found. Default: here, unless a dataset option names the folders.",
        metavar="PATH...",
        show_default=False,
    ),
]
RunArg = Annotated[
    str,
    typer.Argument(
        metavar="RUN",
        help="A repair run's id (as `cachedoctor quarantine list` and repair's undo line show it), a unique "
        "prefix of it (2026-11-28), or latest.",
    ),
]
AllOption = Annotated[
    bool, typer.Option("--all", "--verbose", "-v", help="One line per quarantined file, for every run.")
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")]


def _search(paths: list[str] | None, described: DescriptionOptions, trainer: TrainerPathOptions) -> Search:
    """Where to look: ``paths`` (default: here, without a dataset option) and the cache folders
    the dataset description names; a SimpleTuner checkout among ``paths`` names its own, as in
    ``scan``. A path that does not exist is a :class:`PathError`."""
    from cachedoctor.repair.quarantine_search import SIMPLETUNER_CONFIGS, Search

    config, kohya_config, manifest = described.config, described.kohya_config, described.manifest
    model_family, output_dir = trainer.model_family, trainer.output_dir
    descriptions = (config, kohya_config, manifest)
    for given in descriptions:
        if given and not os.path.isfile(given):
            raise PathError(os.path.abspath(given), "no such file; check the path of the dataset description")
    targets = paths or ([] if any(descriptions) else ["."])
    roots = _described(config, kohya_config, manifest, model_family, output_dir) if any(descriptions) else []
    for path in targets if not config else ():
        found = (os.path.join(path, name) for name in SIMPLETUNER_CONFIGS)
        checkout = next((f for f in found if os.path.isfile(f)), None)
        if checkout is not None:
            try:
                roots += _described(checkout, None, None, model_family, output_dir)
            except PathError:
                pass  # a config nobody named that cannot be read (a template): the walk below still runs
    return Search.of(targets, roots)


def _described(
    config: str | None, kohya_config: str | None, manifest: str | None, model_family: str | None, output_dir: str | None
) -> list[str]:
    from cachedoctor.layouts import LayoutOptions, described_roots
    from cachedoctor.layouts.configs import routed

    return described_roots(
        routed(
            LayoutOptions(
                config=config and os.path.abspath(config),
                kohya_config=kohya_config and os.path.abspath(kohya_config),
                manifest=manifest and os.path.abspath(manifest),
                model_family=model_family,
                output_dir=output_dir,
            )
        )
    )


def _remote(paths: list[str] | None) -> str | None:
    """The s3:// URL among ``paths`` (its quarantine is in the bucket: a ``Prefix`` to look in)."""
    from cachedoctor.stores.interface import is_remote

    remote = [p for p in paths or () if is_remote(p)]
    if remote and len(paths or ()) > 1:
        raise PathError(remote[0], "give one s3:// prefix on its own; run one command per prefix")
    return remote[0] if remote else None


def _look(
    ctx: typer.Context,
    paths: list[str] | None,
    described: DescriptionOptions,
    trainer: TrainerPathOptions,
    s3: S3Options,
) -> Search | Prefix:
    """Where the quarantines are: an s3:// prefix named on its own (its cache root, in the
    bucket: the prefix a repair of that URL works in), else the folders :func:`_search` finds."""
    if url := _remote(paths):
        from cachedoctor.repair.quarantine_search import Prefix
        from cachedoctor.repair.store_flow import one_prefix, where
        from cachedoctor.stores.connect import store_for

        store = store_for(one_prefix([url]), _s3(ctx, s3))
        return Prefix(where(store, url)[0].url, store)
    return _search(paths, described, trainer)


def _s3(ctx: typer.Context, s3: S3Options) -> S3Settings:
    """How to reach the bucket, resolved as every command resolves it (options, variables, config)."""
    from cachedoctor.cli.settings import resolve
    from cachedoctor.options import s3_settings

    return s3_settings(resolve(ctx, s3))


def _where(search: Search | Prefix) -> str:
    return " ".join(search.below + search.here) or "the dataset's cache folders"


@quarantine_app.command("list")
@with_option_groups
def quarantine_list(
    ctx: typer.Context,
    *,
    paths: PathsArg = None,
    described: DescriptionOptions,
    trainer: TrainerPathOptions,
    s3: S3Options,
    every: AllOption = False,
) -> int:
    """Every repair run's quarantine at or below PATH...: per run its time, files, size and why
    (counts by finding kind). `list RUN [PATH...]` or --all: one line per file."""
    run_arg, paths = _run_first(paths)
    from cachedoctor.report.quarantine_text import MORE, write_runs

    env = current()
    out = env.stdout
    search = _look(ctx, paths, described, trainer, s3)
    found = search.runs()
    if run_arg is not None:  # one run, file by file
        run_id = search.resolve(run_arg, _where(search))
        found = [(root, chosen) for root, runs in found if (chosen := [r for r in runs if r.run_id == run_id])]
        every = True
    if not found:
        print(f"no quarantine at or below {_where(search)}", file=out)
        return ExitStatus.CLEAN
    alone = len(found) == 1 and found[0][0] in search.given  # the cache root given: as it always printed
    for root, runs in found:
        if not alone:
            print(f"{root}:", file=out)
        write_runs(runs, "" if alone else "  ", every, env.width, out)
    if not every:
        print(env.wrap(MORE), file=out)
    return ExitStatus.CLEAN


def _run_first(paths: list[str] | None) -> tuple[str | None, list[str] | None]:
    """``list RUN [PATH...]``: a first argument that is no path (nothing of that name here, no
    slash in it, not an s3:// URL) names a run, as ``restore RUN`` takes one."""
    from cachedoctor.stores.interface import is_remote

    if paths and os.sep not in paths[0] and not is_remote(paths[0]) and not os.path.lexists(paths[0]):
        return paths[0], paths[1:] or None
    return None, paths


def _found(search: Search | Prefix, given: str, verb: str) -> tuple[str, list[tuple[str, QuarantineRun]]]:
    """The run id ``given`` names (an id, a unique prefix, ``latest``) and where it is."""
    run_id = search.resolve(given, _where(search))
    found = search.find(run_id, verb)
    if not found:
        raise PathError(
            _where(search), f"no quarantine run {run_id!r} here or below; see `cachedoctor quarantine list`"
        )
    return run_id, found


@quarantine_app.command("restore")
@with_option_groups
def quarantine_restore(
    ctx: typer.Context,
    *,
    run_id: RunArg,
    paths: PathsArg = None,
    described: DescriptionOptions,
    trainer: TrainerPathOptions,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="s3:// caches: restore objects that changed since the repair too (they are kept first)."
        ),
    ] = False,
    yes: YesOption = False,
    s3: S3Options,
) -> int:
    """Put RUN's files back in every cache root at or below PATH... that holds it (one repair run
    is one RUN across all its cache roots); what is there now is quarantined first, so nothing is
    lost."""
    from cachedoctor.cli.consent import agreed, require_someone_to_ask
    from cachedoctor.repair.journal import new_run_id
    from cachedoctor.repair.quarantine_restore import restore
    from cachedoctor.repair.quarantine_search import Prefix

    env = current()
    search = _look(ctx, paths, described, trainer, s3)
    run_id, found = _found(search, run_id, "restore")
    where = " ".join(base for base, _ in found)
    require_someone_to_ask(env, yes, "restoring", f"{run_id} in {where}", "add --yes to restore")
    files = sum(len(run.files) for _, run in found)
    if not agreed(env, yes, f"Put {files} file(s) back (what is there now is quarantined first)? [y/N] "):
        raise PathError(where, "not restored; pass --yes to restore without asking")
    aside = f"restore-{new_run_id()}"
    done: list[tuple[str, str]] = []
    replaced = False
    for base, run in found:
        pairs, kept = restore(base, run, aside, force, search.store)
        done, replaced = done + pairs, replaced or kept
    one = isinstance(search, Prefix)  # an s3:// prefix: its line names it, as it always has
    line = f"restored {len(done)} file(s) from {run_id} in {where if one else f'{len(found)} cache root(s)'}"
    if replaced:  # only then is there a run to name: nothing stood where the files went back
        line += f"; the {'objects' if one else 'files'} they replaced are in quarantine run {aside}"
    print(env.wrap(line), file=env.stdout)
    return ExitStatus.CLEAN


@quarantine_app.command("purge")
@with_option_groups
def quarantine_purge(
    ctx: typer.Context,
    *,
    run_id: RunArg,
    paths: PathsArg = None,
    described: DescriptionOptions,
    trainer: TrainerPathOptions,
    yes: YesOption = False,
    s3: S3Options,
) -> int:
    """Delete RUN's quarantine for good, in every cache root at or below PATH... that holds it
    (the only command that deletes data)."""
    from cachedoctor.cli.consent import agreed, require_someone_to_ask
    from cachedoctor.repair.quarantine_restore import purge

    env = current()
    search = _look(ctx, paths, described, trainer, s3)
    run_id, found = _found(search, run_id, "purge")
    where = " ".join(base for base, _ in found)
    require_someone_to_ask(env, yes, "purging", f"{run_id} in {where}", "add --yes to delete it for good")
    files, size = sum(len(run.files) for _, run in found), sum(run.size for _, run in found)
    if not agreed(env, yes, f"Delete {files} file(s), {human_size(size)}, for good? [y/N] "):
        raise PathError(found[0][1].folder, "not purged; pass --yes to delete it without asking")
    freed = sum(purge(base, run, search.store) for base, run in found)
    print(f"purged {run_id}: {human_size(freed)} freed", file=env.stdout)
    return ExitStatus.CLEAN


__all__ = ["quarantine_app", "quarantine_list", "quarantine_purge", "quarantine_restore"]
