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
    SampleOption,
    WorkersOption,
)
from cachedoctor.cli.report_file import check_writable, write_report
from cachedoctor.cli.settings import resolve
from cachedoctor.errors import PathError, UsageError
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
    output: Annotated[
        str | None, typer.Option("--output", "-o", metavar="FILE", help="Write the report to FILE instead of stdout.")
    ] = None,
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
    write_baseline: Annotated[
        str | None,
        typer.Option(
            "--write-baseline",
            help="Record today's findings in FILE, so later scans with --baseline FILE report only new ones.",
            metavar="FILE",
        ),
    ] = None,
    terminal: TerminalOptions,
    progress: ProgressOptions,
    allow_empty: AllowEmptyOption = None,
    training_run: TrainingRunOptions,
    s3: S3Options,
    inventory: InventoryOption = None,
) -> int:
    """Find broken, leaked, device-tagged, unsafe, missing, orphaned, stale and inconsistent cache files."""
    from cachedoctor.api import audit
    from cachedoctor.cli.progress import progress_display
    from cachedoctor.report import renderer_for

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
    if (
        not settings.paths.value
        and not settings.config.value
        and not settings.kohya_config.value
        and not settings.manifest.value
    ):
        raise UsageError(NO_PATH)
    if output is not None and (unwritable := check_writable(output)):  # before the scan, not after it
        raise UsageError(unwritable)
    if fmt is not OutputFormat.TABLE and output is None:  # a machine format is the whole run's output:
        env.verbosity = min(env.verbosity, QUIET)  # no progress beside it, as repair --format json
    with progress_display(env, settings, "scan") as shown:
        report = audit(
            None,
            settings,
            **trainer.values(),
            baseline=baseline,
            write_baseline=write_baseline,
            progress=shown,
        )
    if report.nothing_to_check:  # one line, exit 2, no report: there was nothing to report on
        raise PathError(*report.empty_problem())
    quiet, verbose = env.verbosity < NORMAL, env.verbosity > NORMAL
    renderer = renderer_for(fmt, env.cwd, width=env.width, quiet=quiet, verbose=verbose, output=output)
    if output is None:
        if report.suppressed is not None and fmt is OutputFormat.TABLE and env.verbosity >= NORMAL:
            done = (
                f"recorded in {report.baseline}; later scans with --baseline {report.baseline} hide them"
                if report.baseline_written
                else f"left out by {report.baseline}"
            )
            print(env.wrap(f"baseline: {report.suppressed} finding(s) {done}"), file=env.stdout)
        renderer.render(report, env.stdout, color=env.color(env.stdout_isatty))
    else:
        error = write_report(output, lambda out: renderer.render(report, out, color=False))
        if error:
            env.error(error)
            return ExitStatus.ERROR
        if fmt is not OutputFormat.TABLE and env.stdout_isatty:
            table = renderer_for(OutputFormat.TABLE, env.cwd, width=env.width, quiet=quiet, verbose=verbose)
            table.render(report, env.stdout, color=env.color(env.stdout_isatty))
    for problem in report.scan.errors:
        hint = (
            "scan again (the store did not serve it)"
            if "://" in problem.path
            else "fix its permissions or move it out of the cache, then scan again"
        )
        env.error(f"{problem.path}: {problem.message}; {hint}")
    return report.exit_code


__all__ = ["scan"]
