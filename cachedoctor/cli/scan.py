"""``cachedoctor scan``: parse, resolve the settings once, call :func:`cachedoctor.api.audit`, render.

Everything that decides the verdict (severity overrides, the baseline, ``--fail-on``) happens in
``audit``, so a library caller gets the same answer; this module only talks to the terminal.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cachedoctor.cli.environment import NORMAL, QUIET, current
from cachedoctor.cli.option_groups import (
    DatasetOptions,
    KohyaOptions,
    ProgressOptions,
    S3Options,
    SelectionOptions,
    TerminalOptions,
    TrainerPathOptions,
    TrainingRunOptions,
    with_option_groups,
)
from cachedoctor.cli.options import (
    NO_PATH,
    AllowEmptyOption,
    DeepOption,
    FailOnOption,
    FileTimeoutOption,
    FormatOption,
    InventoryOption,
    ManifestOption,
    PathsArgument,
    ReportOutputOption,
    SampleOption,
    WorkersOption,
    WriteBaselineOption,
)
from cachedoctor.cli.report_file import check_writable
from cachedoctor.cli.scan_output import join_ranks, merge_and_render, render, split_over_ranks, write_part
from cachedoctor.cli.settings import resolve
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.interface import OutputFormat
from cachedoctor.report.outcome import FailOn


@with_option_groups
def scan(
    ctx: typer.Context,
    *,
    paths: PathsArgument = None,
    deep: DeepOption = None,
    fmt: FormatOption = OutputFormat.TABLE,
    output: ReportOutputOption = None,
    fail_on: FailOnOption = FailOn.ERROR,
    workers: WorkersOption = None,
    dataset: DatasetOptions,
    kohya: KohyaOptions,
    manifest: ManifestOption = None,
    trainer: TrainerPathOptions,
    selection: SelectionOptions,
    sample: SampleOption = None,
    file_timeout: FileTimeoutOption = None,
    baseline: Annotated[
        str | None,
        typer.Option("--baseline", help="Leave out the findings recorded in this baseline file.", metavar="FILE"),
    ] = None,
    write_baseline: WriteBaselineOption = None,
    terminal: TerminalOptions,
    progress: ProgressOptions,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            metavar="K/N",
            help="Scan shard K (0..N-1) of N and write it as a part for `cachedoctor merge` (job arrays).",
        ),
    ] = None,
    merge: Annotated[
        list[str] | None,
        typer.Option(
            "--merge", metavar="PART", help="Merge the parts of a --shard run into one report (as `cachedoctor merge`)."
        ),
    ] = None,
    allow_empty: AllowEmptyOption = None,
    training_run: TrainingRunOptions,
    s3: S3Options,
    inventory: InventoryOption = None,
) -> int:
    """Find broken, leaked, device-tagged, unsafe, missing, orphaned, stale and inconsistent cache files."""
    from cachedoctor.api import audit
    from cachedoctor.cli.progress import progress_display

    env = current()
    env.configure(**terminal.values())
    settings = resolve(
        ctx,
        dataset,
        kohya,
        selection,
        progress,
        training_run,
        s3,
        paths=paths,
        deep=deep,
        fail_on=fail_on,
        workers=workers,
        manifest=manifest,
        sample=sample,
        file_timeout=file_timeout,
        allow_empty=allow_empty,
        inventory=inventory,
    )
    if settings.sample.value and settings.state.value is False:
        raise UsageError(
            "--sample chooses its files through the state database; drop --no-state (or pass --state PATH)"
        )
    if baseline and write_baseline:
        raise UsageError("pass --baseline or --write-baseline, not both")
    if merge:
        if shard or paths:
            raise UsageError("--merge judges the parts by the settings they were scanned with: pass the parts alone")
        return merge_and_render(merge, fmt, output, write_baseline)
    if (
        not settings.paths.value
        and not settings.config.value
        and not settings.kohya_config.value
        and not settings.manifest.value
    ):
        raise UsageError(NO_PATH)
    if output is not None and (unwritable := check_writable(output)):  # before the scan, not after it
        raise UsageError(unwritable)
    if settings.sample.value and (shard is not None or split_over_ranks()):
        from cachedoctor.scan.engine import SAMPLE_SPLIT

        raise UsageError(SAMPLE_SPLIT)
    if shard is not None:
        return write_part(settings, shard, output, trainer.values(), baseline, write_baseline)
    shard_lines = env.verbosity > NORMAL  # -v: each shard's line on stderr, whatever the report's format
    if fmt is not OutputFormat.TABLE and output is None:  # a machine format is the whole run's output:
        env.verbosity = min(env.verbosity, QUIET)  # no progress beside it, as repair --format json
    ranks = join_ranks()
    if ranks is not None:
        ranks.everyone = False  # rank 0 alone merges the parts and reports
        if not ranks.leader:
            env.verbosity = min(env.verbosity, QUIET)  # rank 0 shows the progress and prints the report
    done = False
    try:
        with progress_display(env, settings, "scan") as shown:
            report = audit(
                None,
                settings,
                **trainer.values(),
                baseline=baseline,
                write_baseline=write_baseline if ranks is None or ranks.leader else None,
                progress=shown,
                ranks=ranks,
            )
        if ranks is not None and not ranks.leader:  # rank 0 prints the verdict and exits with it
            done = True
            return ExitStatus.CLEAN  # (a non-zero exit here would have the launcher stop rank 0 mid-report)
        code = render(report, fmt, output)
        if ranks is not None and shard_lines:
            for line in ranks.seen:
                print(f"cachedoctor: {line}", file=env.stderr)
        done = True
        return code
    finally:
        if ranks is not None:
            ranks.close(wait=done)  # rank 0 after its report, the others at once


__all__ = ["scan"]
