"""The ``cachedoctor`` command line (Typer). Every could-not-run problem is one line, exit 2.

A failure to write that no command caught closer to it (an ``OSError`` or SQLite error) still
ends in one line and exit 2 here, never in a traceback and exit 1 (see ``faults.py``).

``run(argv, env)`` is the testable entry point: it returns the exit code instead of exiting and
takes an :class:`Environment`, so tests can fake terminals. Heavy imports (rich, numpy) happen
only on the paths that need them; torch is never imported by ``scan``.
"""

from __future__ import annotations

import contextvars
import os
import sys
from typing import Annotated, Optional

import typer

try:  # typer >= 0.2x vendors click; older ones use the click package
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import ClickException  # type: ignore[no-redef]

from cachedoctor import __version__
from cachedoctor.environment import Environment
from cachedoctor.errors import PathError
from cachedoctor.layouts import LayoutName
from cachedoctor.report import EXIT_COULD_NOT_RUN, EXIT_INTERRUPTED, FailOn, OutputFormat, ScanReport, renderer_for

_ENV: contextvars.ContextVar[Environment] = contextvars.ContextVar("cachedoctor_env")

app = typer.Typer(
    name="cachedoctor",
    help="Audit and repair the on-disk latent and text-embed caches of diffusion-model trainers.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"cachedoctor {__version__}", file=_ENV.get().stdout)
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Audit and repair the on-disk latent and text-embed caches of diffusion-model trainers."""


# The dataset options that `scan` and `manifest build` share.
LayoutOption = Annotated[LayoutName, typer.Option("--layout", help="How the trainer maps dataset items to cache files.", case_sensitive=False)]
ConfigOption = Annotated[Optional[str], typer.Option("--config", help="SimpleTuner multidatabackend.json: the datasets and caches it names.")]
ModelFamilyOption = Annotated[Optional[str], typer.Option("--model-family", help="SimpleTuner model family / kohya arch suffix (sdxl, flux, sd3, ...).")]
OutputDirOption = Annotated[Optional[str], typer.Option("--output-dir", help="SimpleTuner output_dir, for {output_dir} in the config.")]


# `scan`'s settings that a config file or CACHEDOCTOR_* variables may also give (resolved in
# cli_settings.py, which also holds `config show`).
PathsArgument = Annotated[Optional[list[str]], typer.Argument(help="Cache folders or files to scan (kohya: the image folder).", show_default=False, metavar="PATH...")]
DeepOption = Annotated[Optional[bool], typer.Option("--deep", help="Also read the data: CRC-32 of every zip member and NaN/Inf in every floating tensor.", show_default=False)]
FailOnOption = Annotated[FailOn, typer.Option("--fail-on", help="Exit 1 when a finding is at or above this severity.", case_sensitive=False)]
WorkersOption = Annotated[Optional[int], typer.Option("--workers", "-j", min=1, help="Reader processes (default: one per CPU).")]
ManifestOption = Annotated[Optional[str], typer.Option("--manifest", help="A manifest (.jsonl or .csv) naming each cache file's source.")]
StateOption = Annotated[Optional[str], typer.Option("--state", help="The state database that lets a rescan read only changed files (default: .cachedoctor/state.sqlite in each cache folder).", metavar="PATH")]
NoStateOption = Annotated[bool, typer.Option("--no-state", help="Read every file; neither use nor write the state database.")]
SampleOption = Annotated[Optional[str], typer.Option("--sample", help="Deep-read this share of the files, rotating through the cache run by run (never-checked files first): 5% or 3/10.", metavar="SHARE")]
FileTimeoutOption = Annotated[Optional[float], typer.Option("--file-timeout", min=0.1, help="Seconds to judge one file; a file that takes longer is reported (read-timeout) and its reader stopped. Default 10.", show_default=False, metavar="SECONDS")]
ExcludeOption = Annotated[Optional[list[str]], typer.Option("--exclude", help="Skip files and folders matching this glob (relative to each PATH, or a name); repeatable.", show_default=False, metavar="GLOB")]


@app.command()
def scan(
    ctx: typer.Context,
    paths: PathsArgument = None,
    deep: DeepOption = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="Report format.", case_sensitive=False)] = OutputFormat.TABLE,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write the report to FILE instead of stdout.")] = None,
    fail_on: FailOnOption = FailOn.ERROR,
    workers: WorkersOption = None,
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    manifest: ManifestOption = None,
    model_family: ModelFamilyOption = None,
    output_dir: OutputDirOption = None,
    exclude: ExcludeOption = None,
    state: StateOption = None,
    no_state: NoStateOption = False,
    sample: SampleOption = None,
    file_timeout: FileTimeoutOption = None,
    baseline: Annotated[Optional[str], typer.Option("--baseline", help="Leave out the findings recorded in this baseline file.", metavar="FILE")] = None,
    write_baseline: Annotated[Optional[str], typer.Option("--write-baseline", help="Record today's findings in FILE, so later scans with --baseline FILE report only new ones.", metavar="FILE")] = None,
) -> int:
    """Find broken, leaked, device-tagged, unsafe, missing, orphaned, stale and inconsistent cache files."""
    from dataclasses import replace

    from cachedoctor import baseline as baselines
    from cachedoctor.findings import Finding, Severity
    from cachedoctor.layouts import LayoutOptions, plan_for
    from cachedoctor.scan import ScanOptions, TargetError
    from cachedoctor.scan import scan as run_scan
    from cachedoctor.scan.state.sample import Sample

    from cachedoctor.cli_settings import resolve_settings, state_choice

    env = _ENV.get()
    settings = resolve_settings(env, ctx, paths=paths, deep=deep, fail_on=fail_on, workers=workers, layout=layout,
                         config=config, manifest=manifest, exclude=exclude, state=state, no_state=no_state,
                         sample=sample, file_timeout=file_timeout)
    if settings is None:
        return EXIT_COULD_NOT_RUN
    if settings.sample.value and settings.state.value is False:
        env.error("--sample chooses its files through the state database; drop --no-state (or pass --state PATH)")
        return EXIT_COULD_NOT_RUN
    if baseline and write_baseline:
        env.error("pass --baseline or --write-baseline, not both")
        return EXIT_COULD_NOT_RUN
    targets = list(settings.paths.value)
    config, manifest = settings.config.value, settings.manifest.value
    fail_on = FailOn(settings.fail_on.value)
    if not targets and not config and not manifest:
        env.error("no PATH given; name a cache folder, or pass --config multidatabackend.json or --manifest FILE")
        return EXIT_COULD_NOT_RUN
    options = ScanOptions(deep=bool(settings.deep.value), workers=settings.workers.value,
                          exclude=tuple(settings.exclude.value), state=state_choice(settings.state.value),
                          sample=Sample.parse(settings.sample.value) if settings.sample.value else None,
                          file_timeout=settings.file_timeout.value)
    layout_options = LayoutOptions(config=config, manifest=manifest, model_family=model_family, output_dir=output_dir)
    try:
        for target in targets:  # a missing target is the user's first problem, whatever the layout
            if not os.path.exists(target):
                raise TargetError(os.path.abspath(target), "no such file or folder; check the path (and that its disk is mounted)")
        plan, layout_line = plan_for(LayoutName(settings.layout.value), [os.path.abspath(t) for t in targets], layout_options)
        roots = plan.roots if plan is not None else targets
        with _progress(env) as progress:
            result = run_scan(roots, options, progress=progress, dataset=plan)
        overrides = settings.severity.value
        if overrides:
            result.findings = sorted((replace(f, severity=Severity(overrides[f.kind])) if f.kind in overrides else f
                                      for f in result.findings), key=Finding.sort_key)
        suppressed = None
        if write_baseline:
            baselines.write(write_baseline, result.findings)
            baseline = write_baseline
        if baseline:
            result.findings, suppressed = baselines.suppress(baseline, result.findings)
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    report = ScanReport(result, fail_on, layout_line)
    renderer = renderer_for(fmt, env.cwd)
    if output is None:
        if suppressed is not None and fmt is OutputFormat.TABLE:
            verb = "recorded in" if write_baseline else "left out by"
            print(f"{suppressed} finding(s) {verb} the baseline {baseline}", file=env.stdout)
        renderer.render(report, env.stdout, color=bool(env.stdout_isatty))
    else:
        error = _write_report(output, lambda out: renderer.render(report, out, color=False))
        if error:
            env.error(error)
            return EXIT_COULD_NOT_RUN
        if fmt is not OutputFormat.TABLE and env.stdout_isatty:
            renderer_for(OutputFormat.TABLE, env.cwd).render(report, env.stdout, color=True)
    for problem in result.errors:
        env.error(f"{problem.path}: {problem.message}; fix its permissions or move it out of the cache, then scan again")
    return report.exit_code


manifest_app = typer.Typer(help="Build a manifest of a dataset: per item its size, mtime, xxh3 and cache path(s).",
                           no_args_is_help=True)
app.add_typer(manifest_app, name="manifest")


@manifest_app.command("build")
def manifest_build(
    dataset: Annotated[Optional[str], typer.Argument(help="The dataset (kohya: image folder; OneTrainer: cache folder).", show_default=False, metavar="DATASET_DIR")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="Where to write the manifest (.jsonl).")] = "manifest.jsonl",
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    model_family: ModelFamilyOption = None,
    output_dir: OutputDirOption = None,
) -> int:
    """Write one row per cache file: its source's path, size, mtime and xxh3, and the cache path."""
    import time

    from cachedoctor.layouts import LayoutError, LayoutOptions, plan_for
    from cachedoctor.manifest_build import build

    env = _ENV.get()
    if dataset is None and not config:
        env.error("no DATASET_DIR given; name the dataset folder, or pass --config multidatabackend.json")
        return EXIT_COULD_NOT_RUN
    if layout is LayoutName.MANIFEST:
        env.error("--layout manifest reads a manifest; pick the trainer's layout to build one")
        return EXIT_COULD_NOT_RUN
    targets = [os.path.abspath(dataset)] if dataset else []
    started = time.perf_counter()
    try:
        if dataset and not os.path.isdir(dataset):
            raise LayoutError(targets[0], "no such folder; check the path (and that its disk is mounted)")
        plan, line = plan_for(layout, targets, LayoutOptions(config=config, model_family=model_family, output_dir=output_dir))
        if plan is None:
            raise LayoutError(targets[0] if targets else ".", "no trainer layout recognised here; pass --layout kohya|onetrainer|simpletuner")
        result = build(plan, output)
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return EXIT_COULD_NOT_RUN
    print(f"{line}\nwrote {result.rows} rows for {plan.items} items to {output} in {time.perf_counter() - started:.2f}s",
          file=env.stdout)
    for source in result.unreadable:
        env.error(f"{source}: cannot read to hash it; fix its permissions, then build again")
    return EXIT_COULD_NOT_RUN if result.unreadable else 0


@app.command()
def explain(
    kind: Annotated[Optional[str], typer.Argument(help="A finding kind (batch-leak or batch_leak); none lists them all.", show_default=False, metavar="KIND")] = None,
) -> int:
    """What a finding kind means, why it breaks training, what repair does and how to find it."""
    from cachedoctor.explain import UnknownKind, listing
    from cachedoctor.explain import explain as render

    env = _ENV.get()
    if kind is None:
        print(listing(), file=env.stdout)
        return 0
    try:
        text = render(kind)
    except UnknownKind as exc:
        env.error(str(exc))
        return EXIT_COULD_NOT_RUN
    print(text, file=env.stdout)
    return 0


def _write_report(path: str, write) -> str | None:  # type: ignore[no-untyped-def]
    """Write atomically (temp file beside it, then rename); an error message or ``None``."""
    from cachedoctor.atomic import atomic_text

    try:
        with atomic_text(path, prefix=".cachedoctor-report-") as out:
            write(out)
    except OSError as exc:
        return f"{path}: cannot write the report ({exc.strerror or exc}); choose another --output"
    return None


class _progress:
    """A rich progress line on stderr, only when stderr is a terminal."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.bar = None

    def __enter__(self):  # type: ignore[no-untyped-def]
        if not self.env.stderr_isatty:
            return None
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(), TextColumn("scanning: {task.completed} files, {task.fields[mb]:.1f} MB"),
                            TimeElapsedColumn(), console=Console(file=self.env.stderr), transient=True)
        self.bar.start()
        task = self.bar.add_task("scan", total=None, mb=0.0)

        def update(files: int, nbytes: int) -> None:
            self.bar.update(task, completed=files, mb=nbytes / 1e6)

        return update

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def run(argv: list[str] | None = None, env: Environment | None = None) -> int:
    """Run the CLI and return its exit code (0 clean, 1 findings, 2 could not run, 130 Ctrl-C)."""
    env = env or Environment()
    token = _ENV.set(env)
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="cachedoctor",
                          standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        code = EXIT_INTERRUPTED
    except ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `cachedoctor`: show the help
            print(exc.format_message(), file=env.stdout)
            return 0
        ctx = getattr(exc, "ctx", None)
        where = f"cachedoctor {ctx.info_name}" if ctx is not None and ctx.info_name != "cachedoctor" else "cachedoctor"
        env.error(f"{exc.format_message()} (see `{where} --help`)")
        return EXIT_COULD_NOT_RUN
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as exc:  # the safety net of the fault model (faults.py): OSError, SQLite
        from cachedoctor.faults import last_resort
        from cachedoctor.lifetime import caused_by_interrupt

        line = last_resort(exc)
        if caused_by_interrupt(exc):
            code = EXIT_INTERRUPTED
        elif line is None:
            raise  # a bug: the traceback is what a report needs
        else:
            env.error(line)
            return EXIT_COULD_NOT_RUN
    finally:
        _ENV.reset(token)
    if code == EXIT_INTERRUPTED:  # typer hands Ctrl-C back as 130, returned or raised
        env.error(env.interrupted)
    return code


from cachedoctor import cli_repair, cli_settings  # noqa: E402,F401  (register repair, quarantine, recover, config)

__all__ = ["app", "run", "cli_repair", "cli_settings"]

