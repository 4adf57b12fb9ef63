"""``cachedoctor repair``: fix what scan finds. Also the plumbing ``recover --apply`` shares.

Its scans (before and after) are the scan ``cachedoctor scan`` runs with the same settings
(``exclude``, ``state``, reader ``workers``, ``file-timeout`` from ``cachedoctor.options``), so a
file scan leaves out is never planned on. ``--workers`` here counts *recompute* processes; the
scan's readers come from the settings (``CACHEDOCTOR_WORKERS``, ``workers =``). Repair reads
deep unless ``--quick`` (a plain repair must not leave CRC and NaN damage it could fix); a
configured ``sample`` is not used: repair reads everything it may act on. The per-folder state
database is used where ``scan`` made one (so unchanged files' deep results are taken from it and
``scan`` and ``repair`` agree on what is wrong), never created; ``--dry-run`` reads without it
and changes nothing in the cache folder.
"""

from __future__ import annotations

from typing import Any

import typer

from cachedoctor.cli.consent import described, require_someone_to_ask
from cachedoctor.cli.environment import current
from cachedoctor.cli.option_groups import (
    DatasetOptions,
    KohyaOptions,
    OptionGroup,
    ProgressOptions,
    RepairOutputOptions,
    S3Options,
    SelectionOptions,
    TerminalOptions,
    TrainerPathOptions,
    with_option_groups,
)
from cachedoctor.cli.options import (
    NO_PATH,
    AllowEmptyOption,
    FileTimeoutOption,
    RepairManifestOption,
    RepairPathsArgument,
    YesOption,
)
from cachedoctor.cli.repair_options import (
    BatchSizeOption,
    DeepOption,
    DeviceOption,
    DryRunOption,
    EncoderOption,
    FreshOption,
    GpusOption,
    KeepBlockedOption,
    OnlyOption,
    Posterior,
    PosteriorOption,
    QuickOption,
    RecomputeWorkersOption,
    ResumeOption,
    SeedOption,
)
from cachedoctor.cli.repair_output import emit, output_mode
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus

#: The per-folder state database, only where ``scan`` made one (``scan.state.plan.EXISTING``; not
#: imported: the CLI stays light); a dry run reads it, or the one named, and never writes it.
EXISTING = "existing"


@with_option_groups
def repair(
    ctx: typer.Context,
    *,
    paths: RepairPathsArgument = None,
    dry_run: DryRunOption = False,
    encoder: EncoderOption = None,
    gpus: GpusOption = None,
    device: DeviceOption = "cpu",
    workers: RecomputeWorkersOption = 1,
    batch_size: BatchSizeOption = 8,
    only: OnlyOption = None,
    yes: YesOption = False,
    resume: ResumeOption = False,
    fresh: FreshOption = False,
    deep: DeepOption = None,
    quick: QuickOption = False,
    keep_blocked: KeepBlockedOption = False,
    posterior: PosteriorOption = Posterior.TRAINER,
    seed: SeedOption = 0,
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
    """Fix what scan finds: lossless rewrites, quarantine, and recompute through an encoder."""
    from cachedoctor.explain import kinds as known_kinds
    from cachedoctor.options import scan_options
    from cachedoctor.repair.run import RepairOptions, still_broken
    from cachedoctor.report.repair_lines import Lines
    from cachedoctor.report.repair_text import RepairReport, print_result

    env = current()
    env.configure(**terminal.values())
    fmt, output = written.fmt, written.output
    human = output_mode(env, fmt, output, yes or dry_run, "add --yes to repair, or --dry-run for the plan alone")
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
        deep=deep,
        allow_empty=allow_empty,
    )
    if quick and deep:
        raise UsageError("--quick and --deep contradict each other; repair reads deep unless --quick")
    kinds = frozenset(k.strip() for k in only.split(",") if k.strip()) if only else None
    known = set(known_kinds())
    if kinds and kinds - known:
        raise UsageError(
            f"--only: unknown kind(s) {', '.join(sorted(kinds - known))}; choose from {', '.join(sorted(known))}"
        )
    if not dry_run:
        require_someone_to_ask(
            env, yes, "repairing", described(settings, targets), "add --yes to repair, or --dry-run for the plan"
        )
    options = RepairOptions(
        # a dry run reads scan's state database without writing it: it plans what repair would,
        # and changes nothing in the cache folder
        scan=scan_options(settings, deep=not quick, sample=False, default_state=EXISTING, read_only=dry_run),
        encoders=tuple(encoder or ()),
        gpus=gpus,
        device=device,
        workers=workers,
        batch_size=batch_size,
        only=kinds,
        dry_run=dry_run,
        fresh=fresh and not resume,
        keep_blocked=keep_blocked,
        posterior=posterior.value,
        seed=seed,
        allow_empty=bool(settings.allow_empty.value),
    )
    outcome = run_repair(settings, targets, options, yes, trainer, human=human)
    if isinstance(outcome, RepairReport):  # declined
        return outcome.exit_code
    if dry_run:
        report = RepairReport(outcome, dry_run=True)
        if not outcome.leader:  # the leader rank shows the plan and writes the document
            return report.exit_code
        if human:
            Lines(env).say("dry run: nothing was changed")
    elif not outcome.leader:
        return ExitStatus.CLEAN
    else:
        report = RepairReport(outcome, tuple(still_broken(outcome)))
        if human:
            print_result(report, env)
    return emit(report, "repair", targets, fmt, output)


def resolve_targets(ctx: typer.Context, *groups: OptionGroup, **cli: Any) -> tuple[Any, list[str]]:
    """The settings (as ``scan`` resolves them: command line, ``CACHEDOCTOR_*``,
    ``[tool.cachedoctor]``) and the absolute, existing targets."""
    from cachedoctor.api import require_existing
    from cachedoctor.cli.settings import resolve

    settings = resolve(ctx, *groups, **cli)
    if (
        not settings.paths.value
        and not settings.config.value
        and not settings.kohya_config.value
        and not settings.manifest.value
    ):
        raise UsageError(NO_PATH)
    return settings, require_existing(settings.paths.value)


def run_repair(
    settings: Any,
    targets: list[str],
    options: Any,
    yes: bool,
    trainer: TrainerPathOptions,
    *,
    human: bool = True,
    command: str = "repair",
) -> Any:
    """Run the repair machinery with the plan printed (``human``: the text for people) and the
    question asked: the outcome, or a declined :class:`RepairReport` when the user said no."""
    from cachedoctor.cli.consent import agreed
    from cachedoctor.cli.progress import progress_display
    from cachedoctor.options import layout_name, layout_options
    from cachedoctor.repair.model import Declined
    from cachedoctor.repair.run import repair as core_repair
    from cachedoctor.report.repair_text import RepairReport, print_plan

    env = current()
    line = progress_display(env, settings, command)

    def show_plan(outcome: Any) -> None:
        line.pause()  # the plan and the question go to the terminal without the progress line
        if human:
            print_plan(outcome, env)

    def confirm(outcome: Any) -> bool:
        line.pause()
        go = agreed(env, yes, "Go ahead? [y/N] ")  # no terminal and no --yes stopped before the scan
        if go:  # from here on Ctrl-C leaves a journal the next run finishes
            env.interrupted = (
                "interrupted; run the same command again to finish (the journal resumes it; nothing is lost)"
            )
        return go

    try:
        with line as progress:
            return core_repair(
                targets,
                layout_name(settings),
                layout_options(settings, trainer.model_family, trainer.output_dir),
                options,
                list(env.argv),
                confirm,
                show_plan,
                progress=progress,
            )
    except Declined:
        print("nothing was changed", file=env.stdout)
        return RepairReport(declined=True)


__all__ = ["repair", "resolve_targets", "run_repair"]
