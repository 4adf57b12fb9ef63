"""How ``scan``, ``repair`` and ``recover`` settle their settings, and ``cachedoctor config show``.

Command line > ``CACHEDOCTOR_*`` > ``[tool.cachedoctor]`` > defaults (``config.py`` does the
merging). ``--fail-on`` and ``--layout`` keep their defaults for the help, so :func:`given`
asks click whether they were typed.
"""

from __future__ import annotations

import os


import typer

from cachedoctor.cli import (_ENV, ConfigOption, DeepOption, ExcludeOption, FailOnOption, FileTimeoutOption, LayoutOption,
                             ManifestOption, NoStateOption, PathsArgument, SampleOption, StateOption, WorkersOption, app)
from cachedoctor.environment import Environment
from cachedoctor.layouts import LayoutName
from cachedoctor.report import EXIT_COULD_NOT_RUN, FailOn


def given(ctx: typer.Context, name: str, value: object) -> object:
    """``value`` if it came from the command line, else ``None`` (a file or variable may set it)."""
    source = ctx.get_parameter_source(name)  # click's ParameterSource (typer may vendor click)
    return value if source is not None and source.name == "COMMANDLINE" else None


def resolve_settings(env: Environment, ctx: typer.Context, **cli: object):  # type: ignore[no-untyped-def]
    """The resolved settings, or ``None`` after reporting a broken config file or variable.
    ``fail_on`` and ``layout`` count only when typed (their defaults show in the help)."""
    from cachedoctor.config import ConfigError, resolve

    for name in ("fail_on", "layout"):
        cli[name] = given(ctx, name, cli[name])
    if cli.pop("no_state", False):
        if cli.get("state"):
            env.error("pass --state PATH or --no-state, not both")
            return None
        cli["state"] = False
    if cli.get("sample") is not None:
        from cachedoctor.scan.state.sample import Sample

        try:
            cli["sample"] = Sample.parse(str(cli["sample"])).text
        except ValueError as exc:
            env.error(f"--sample {exc}")
            return None
    try:
        return resolve(cli, env.environ, env.cwd)
    except ConfigError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return None


config_app = typer.Typer(help="The settings `scan` uses: command line, CACHEDOCTOR_* variables, [tool.cachedoctor].",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    ctx: typer.Context,
    paths: PathsArgument = None,
    deep: DeepOption = None,
    fail_on: FailOnOption = FailOn.ERROR,
    workers: WorkersOption = None,
    layout: LayoutOption = LayoutName.AUTO,
    config: ConfigOption = None,
    manifest: ManifestOption = None,
    exclude: ExcludeOption = None,
    state: StateOption = None,
    no_state: NoStateOption = False,
    sample: SampleOption = None,
    file_timeout: FileTimeoutOption = None,
) -> int:
    """Print each scan setting, its value and where it came from (the same options as scan)."""
    env = _ENV.get()
    settings = resolve_settings(env, ctx, paths=paths, deep=deep, fail_on=fail_on, workers=workers, layout=layout,
                         config=config, manifest=manifest, exclude=exclude, state=state, no_state=no_state,
                         sample=sample, file_timeout=file_timeout)
    if settings is None:
        return EXIT_COULD_NOT_RUN
    print(f"config file: {settings.file or '(none found)'}", file=env.stdout)
    rows = [(name.replace("_", "-"), shown(name, s.value), s.source) for name, s in settings.items()]
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {value:<{value_width}}  ({source})", file=env.stdout)
    return 0


def shown(name: str, value: object) -> str:
    from cachedoctor.config import show_value

    if name == "state" and (value is None or value is False):
        return "off" if value is False else "<each folder PATH>/.cachedoctor/state.sqlite"
    return show_value(value)


def state_choice(value: str | bool | None) -> str | None:
    """``ScanOptions.state`` from the setting: the default per-target database, none, or a path."""
    from cachedoctor.scan.state.plan import AUTO

    if value is None:
        return AUTO
    return None if value is False else os.path.expanduser(str(value))
