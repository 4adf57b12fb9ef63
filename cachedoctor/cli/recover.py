"""``cachedoctor recover``: after a crash, find temp files, damaged recent writes, held locks and
interrupted repairs; ``--apply`` quarantines what is partial and resumes through ``repair``."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Annotated

import typer

from cachedoctor.cli.consent import described, require_someone_to_ask
from cachedoctor.cli.environment import QUIET, Environment, current
from cachedoctor.cli.option_groups import (
    DatasetOptions,
    KohyaOptions,
    ProgressOptions,
    RepairOutputOptions,
    S3Options,
    SelectionOptions,
    TerminalOptions,
    TrainerPathOptions,
    with_option_groups,
)
from cachedoctor.cli.options import (
    AllowEmptyOption,
    FileTimeoutOption,
    RepairManifestOption,
    RepairPathsArgument,
    YesOption,
)
from cachedoctor.cli.repair import resolve_targets, run_repair
from cachedoctor.cli.repair_output import emit, output_mode
from cachedoctor.cli.scan_output import join_ranks
from cachedoctor.errors import PathError
from cachedoctor.exit_status import ExitStatus

if TYPE_CHECKING:
    from cachedoctor.scan.options import ScanOptions
    from cachedoctor.settings import Settings


@with_option_groups
def recover(
    ctx: typer.Context,
    *,
    paths: RepairPathsArgument = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Quarantine what is partial and resume the interrupted repair.")
    ] = False,
    encoder: Annotated[
        list[str] | None,
        typer.Option("--encoder", metavar="SPEC", help="For recomputes (default: the interrupted repair's own)."),
    ] = None,
    yes: YesOption = False,
    dataset: DatasetOptions,
    kohya: KohyaOptions,
    manifest: RepairManifestOption = None,
    trainer: TrainerPathOptions,
    file_timeout: FileTimeoutOption = None,
    selection: SelectionOptions,
    written: RepairOutputOptions,
    terminal: TerminalOptions,
    progress: ProgressOptions,
    allow_empty: AllowEmptyOption = None,
    s3: S3Options,
) -> int:
    """After a crash: find temp files, damaged recent writes, held locks and interrupted repairs."""
    from dataclasses import replace

    from cachedoctor.options import scan_options

    env = current()
    env.configure(**terminal.values())
    fmt, output = written.fmt, written.output
    human = output_mode(env, fmt, output, yes or not apply, "add --yes to apply, or leave out --apply for the survey")
    settings, targets = resolve_targets(
        ctx,
        dataset,
        kohya,
        selection,
        progress,
        s3,
        paths=paths,
        manifest=manifest,
        file_timeout=file_timeout,
        allow_empty=allow_empty,
    )
    if apply:
        require_someone_to_ask(
            env,
            yes,
            "recovering",
            described(settings, targets),
            "add --yes to apply, or leave out --apply for the survey",
        )
    scanning = scan_options(settings, sample=False, default_state=False)
    ranks = join_ranks()  # under torchrun: each rank surveys its shard, rank 0 prints
    if ranks is None:
        return _recover(env, settings, targets, scanning, apply, encoder, yes, trainer, written, human)
    if not ranks.leader:
        env.stdout, env.verbosity = io.StringIO(), QUIET  # the same work, nothing shown: rank 0 shows it
    done = False
    try:
        scanning = replace(scanning, shard=ranks.shard, ranks=ranks)
        try:
            code = _recover(env, settings, targets, scanning, apply, encoder, yes, trainer, written, human)
        except Exception as exc:  # (planning the dataset, say): the others are told, rank 0 prints it
            ranks.fail(exc)
        done = True
        return code if ranks.leader else ExitStatus.CLEAN  # rank 0's is the verdict
    finally:
        ranks.close(wait=done)


def _recover(
    env: Environment,
    settings: Settings,
    targets: list[str],
    scanning: ScanOptions,
    apply: bool,
    encoder: list[str] | None,
    yes: bool,
    trainer: TrainerPathOptions,
    written: RepairOutputOptions,
    human: bool,
) -> int:
    """The survey, and with ``apply`` the repair that finishes what the crash left."""
    from dataclasses import replace

    from cachedoctor.cli.progress import progress_display
    from cachedoctor.options import layout_name, layout_options
    from cachedoctor.repair.recover import resumed_only, survey
    from cachedoctor.repair.run import RepairOptions, still_broken
    from cachedoctor.report.repair_lines import Lines, whole
    from cachedoctor.report.repair_text import RepairReport, print_result, print_survey

    fmt, output = written.fmt, written.output
    lines = Lines(env)
    with progress_display(env, settings, "recover") as shown:  # a bar is erased before the survey
        found = survey(
            targets,
            layout_name(settings),
            layout_options(settings, trainer.model_family, trainer.output_dir),
            scanning,
            allow_empty=bool(settings.allow_empty.value),
            progress=shown,
        )
    if human:
        print_survey(found, env)
    if found.empty or not apply:
        if not found.empty and human:
            lines.say(
                whole("`cachedoctor recover --apply`")
                + " with the same arguments quarantines what is partial"
                + (" and resumes the interrupted repair" if found.interrupted else "")
            )
        return emit(RepairReport(survey=found), "recover", targets, fmt, output)
    if found.held_locks:
        raise PathError(
            found.held_locks[0],
            "a running process holds this lock (a writer is still active); stop it or let it finish, then recover",
        )
    resumed = found.interrupted[0][1] if found.interrupted else None
    encoders = tuple(encoder or ()) or (resumed.encoders if resumed else ())
    options = RepairOptions(
        scan=replace(scanning, deep=True),
        encoders=encoders,
        only=resumed_only(resumed),  # a resumed run keeps its own scope (its --only, --keep-blocked)
        keep_blocked=bool(resumed and resumed.keep_blocked),
        allow_empty=bool(settings.allow_empty.value),
        take_stale_lock=True,  # an s3:// prefix's lock left by a dead repair
    )
    if human:
        lines.say()
    outcome = run_repair(settings, targets, options, yes, trainer, human=human, command="recover")
    if isinstance(outcome, RepairReport):  # declined
        return outcome.exit_code
    report = RepairReport(outcome, tuple(still_broken(outcome)), survey=found)
    if human:
        print_result(report, env)
    return emit(report, "recover", targets, fmt, output)


__all__ = ["recover"]
