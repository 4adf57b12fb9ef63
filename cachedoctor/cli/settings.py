"""``cachedoctor settings show`` and the one place the CLI resolves settings.

Command line > ``CACHEDOCTOR_*`` > ``[tool.cachedoctor]`` > defaults (``cachedoctor/settings.py``
does the merging). ``--fail-on`` and ``--layout`` keep their defaults for the help, so
:func:`given` asks click whether they were typed. ``config show``, the command's old name, is kept
as a hidden alias that prints the same.
"""

from __future__ import annotations

import enum
from typing import Any

import typer

from cachedoctor.cli.environment import current
from cachedoctor.cli.option_groups import (
    DatasetOptions,
    KohyaOptions,
    OptionGroup,
    ProgressOptions,
    S3Options,
    SelectionOptions,
    TrainingRunOptions,
    with_option_groups,
)
from cachedoctor.cli.options import (
    AllowEmptyOption,
    DeepOption,
    FailOnOption,
    FileTimeoutOption,
    InventoryOption,
    ManifestOption,
    PathsArgument,
    SampleOption,
    WorkersOption,
)
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.report.outcome import FailOn
from cachedoctor.settings import Settings


def given(ctx: typer.Context, name: str, value: object) -> object:
    """``value`` if it came from the command line, else ``None`` (a file or variable may set it)."""
    source = ctx.get_parameter_source(name)  # click's ParameterSource (typer may vendor click)
    return value if source is not None and source.name == "COMMANDLINE" else None


def resolve(ctx: typer.Context, *groups: OptionGroup, **cli: Any) -> Settings:
    """The settings of the running command, from ``groups``' options and the ones named in ``cli``.
    Raises ``ConfigError`` (a broken config file or variable) or :class:`UsageError`.
    ``fail_on`` and ``layout`` count only when typed."""
    from cachedoctor.settings import resolve as merge

    for group in groups:
        cli.update(group.values())
    for name in ("fail_on", "layout"):
        if name in cli:
            value = given(ctx, name, cli[name])
            cli[name] = getattr(value, "value", value)
    for name, value in cli.items():  # the settings take plain values (--progress's choice)
        if isinstance(value, enum.Enum):
            cli[name] = value.value
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


@with_option_groups
def settings_show(
    ctx: typer.Context,
    *,
    paths: PathsArgument = None,
    deep: DeepOption = None,
    fail_on: FailOnOption = FailOn.ERROR,
    workers: WorkersOption = None,
    dataset: DatasetOptions,
    kohya: KohyaOptions,
    manifest: ManifestOption = None,
    selection: SelectionOptions,
    sample: SampleOption = None,
    file_timeout: FileTimeoutOption = None,
    allow_empty: AllowEmptyOption = None,
    training_run: TrainingRunOptions,
    s3: S3Options,
    inventory: InventoryOption = None,
    progress: ProgressOptions,
) -> int:
    """Print each setting, its value and where it came from (the same options as scan)."""
    from cachedoctor.settings import show_value

    env = current()
    settings = resolve(
        ctx,
        dataset,
        kohya,
        selection,
        training_run,
        s3,
        progress,
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
