"""``cachedoctor settings show`` and the one place the CLI resolves settings.

Command line > ``CACHEDOCTOR_*`` > ``[tool.cachedoctor]`` > defaults (``cachedoctor/settings.py``
does the merging). ``--fail-on`` and ``--layout`` keep their defaults for the help, so
:func:`given` asks click whether they were typed. ``config show``, the command's old name, is kept
as a hidden alias that prints the same.
"""

from __future__ import annotations

from typing import Any

import typer

from cachedoctor.cli.environment import current
from cachedoctor.cli.options import (
    AllowEmptyOption,
    BatchSizeOption,
    BucketNoUpscaleOption,
    BucketResoStepsOption,
    ConfigOption,
    DeepOption,
    EnableBucketOption,
    ExcludeOption,
    FailOnOption,
    FileTimeoutOption,
    KohyaConfigOption,
    LayoutChoice,
    LayoutOption,
    ManifestOption,
    MaxBucketResoOption,
    MinBucketResoOption,
    NoStateOption,
    PathsArgument,
    ResolutionOption,
    S3EndpointUrlOption,
    S3ProfileOption,
    S3RegionOption,
    SampleOption,
    StateOption,
    WorkersOption,
    WorldSizeOption,
)
from cachedoctor.cli.progress import ProgressIntervalOption, ProgressOption
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.outcome import FailOn
from cachedoctor.settings import Settings


def given(ctx: typer.Context, name: str, value: object) -> object:
    """``value`` if it came from the command line, else ``None`` (a file or variable may set it)."""
    source = ctx.get_parameter_source(name)  # click's ParameterSource (typer may vendor click)
    return value if source is not None and source.name == "COMMANDLINE" else None


def resolve(ctx: typer.Context, **cli: Any) -> Settings:
    """The settings of the running command. Raises ``ConfigError`` (a broken config file or
    variable) or :class:`UsageError`. ``fail_on`` and ``layout`` count only when typed."""
    from cachedoctor.settings import resolve as merge

    for name in ("fail_on", "layout"):
        if name in cli:
            value = given(ctx, name, cli[name])
            cli[name] = getattr(value, "value", value)
    if cli.pop("no_state", False):
        if cli.get("state"):
            raise UsageError("pass --state PATH or --no-state, not both")
        cli["state"] = False
    if cli.get("sample") is not None:
        from cachedoctor.scan.state.sample import Sample

        try:
            cli["sample"] = Sample.parse(str(cli["sample"])).text
        except ValueError as exc:
            raise UsageError(f"--sample {exc}") from None
    env = current()
    return merge(cli, env.environ, env.cwd)


settings_app = typer.Typer(
    help="cachedoctor's own settings: command line, CACHEDOCTOR_* variables, [tool.cachedoctor].", no_args_is_help=True
)
#: The old name, hidden: ``cachedoctor config show`` prints the same as ``settings show``.
config_app = typer.Typer(help="Old name of `cachedoctor settings`.", no_args_is_help=True)


def settings_show(
    ctx: typer.Context,
    paths: PathsArgument = None,
    deep: DeepOption = None,
    fail_on: FailOnOption = FailOn.ERROR,
    workers: WorkersOption = None,
    layout: LayoutOption = LayoutChoice.AUTO,
    config: ConfigOption = None,
    kohya_config: KohyaConfigOption = None,
    resolution: ResolutionOption = None,
    enable_bucket: EnableBucketOption = None,
    min_bucket_reso: MinBucketResoOption = None,
    max_bucket_reso: MaxBucketResoOption = None,
    bucket_reso_steps: BucketResoStepsOption = None,
    bucket_no_upscale: BucketNoUpscaleOption = None,
    manifest: ManifestOption = None,
    exclude: ExcludeOption = None,
    state: StateOption = None,
    no_state: NoStateOption = False,
    sample: SampleOption = None,
    file_timeout: FileTimeoutOption = None,
    allow_empty: AllowEmptyOption = None,
    world_size: WorldSizeOption = None,
    batch_size: BatchSizeOption = None,
    s3_endpoint_url: S3EndpointUrlOption = None,
    s3_profile: S3ProfileOption = None,
    s3_region: S3RegionOption = None,
    progress: ProgressOption = None,
    progress_interval: ProgressIntervalOption = None,
) -> int:
    """Print each setting, its value and where it came from (the same options as scan)."""
    from cachedoctor.settings import show_value

    env = current()
    settings = resolve(
        ctx,
        s3_endpoint_url=s3_endpoint_url,
        s3_profile=s3_profile,
        s3_region=s3_region,
        paths=paths,
        deep=deep,
        fail_on=fail_on,
        workers=workers,
        layout=layout,
        config=config,
        kohya_config=kohya_config,
        resolution=resolution,
        enable_bucket=enable_bucket,
        min_bucket_reso=min_bucket_reso,
        max_bucket_reso=max_bucket_reso,
        bucket_reso_steps=bucket_reso_steps,
        bucket_no_upscale=bucket_no_upscale,
        manifest=manifest,
        exclude=exclude,
        state=state,
        no_state=no_state,
        sample=sample,
        file_timeout=file_timeout,
        allow_empty=allow_empty,
        world_size=world_size,
        batch_size=batch_size,
        progress=progress and progress.value,
        progress_interval=progress_interval,
    )
    print(f"config file: {settings.file or '(none found)'}", file=env.stdout)
    rows = [(name.replace("_", "-"), _shown(name, s.value, show_value), s.source) for name, s in settings.items()]
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {value:<{value_width}}  ({source})", file=env.stdout)
    return ExitStatus.CLEAN


def _shown(name: str, value: object, show_value: Any) -> str:
    if name == "state" and (value is None or value is False):
        return "off" if value is False else "<each folder PATH>/.cachedoctor/state.sqlite"
    return show_value(value)


settings_app.command("show")(settings_show)
config_app.command("show")(settings_show)

__all__ = ["config_app", "given", "resolve", "settings_app", "settings_show"]
