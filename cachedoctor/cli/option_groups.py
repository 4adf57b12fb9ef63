"""The runs of options several commands take, each declared once as an :class:`OptionGroup`.

``scan``, ``repair``, ``recover``, ``settings show``, ``manifest build`` and the ``quarantine``
commands used to repeat the same 10 to 35 parameter lines (and pass them on one by one). A group
is a frozen dataclass whose fields are the options (their ``Annotated`` declarations live in
``options.py``, ``progress.py`` and ``repair_output.py``); a command names it as one parameter::

    @with_option_groups
    def scan(ctx: typer.Context, ..., *, s3: S3Options, ...) -> int:
        ... s3.s3_region ...

:func:`with_option_groups` shows Typer the group's fields in that parameter's place (so each
command's ``--help`` lists them where it always did) and hands the command one group object built
from what was parsed. Option names, help and defaults are the fields' own, so they cannot drift
apart between commands (``tests/unit/cli/test_option_groups.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from cachedoctor.cli.options import (
    BatchSizeOption,
    BucketNoUpscaleOption,
    BucketResoStepsOption,
    ColorChoice,
    ColorOption,
    ConfigOption,
    EnableBucketOption,
    ExcludeOption,
    KohyaConfigOption,
    LayoutChoice,
    LayoutOption,
    ManifestOption,
    MaxBucketResoOption,
    MinBucketResoOption,
    ModelFamilyOption,
    NoStateOption,
    OutputDirOption,
    QuietOption,
    ResolutionOption,
    S3EndpointUrlOption,
    S3ProfileOption,
    S3RegionOption,
    StateOption,
    VerboseOption,
    WorldSizeOption,
)
from cachedoctor.cli.progress import ProgressIntervalOption, ProgressOption
from cachedoctor.cli.repair_output import RepairFormat, RepairFormatOption, RepairOutputOption

_Command = TypeVar("_Command", bound=Callable[..., Any])


class OptionGroup:
    """Base of the groups below: each is a ``@dataclass(frozen=True)`` of ``Annotated`` options."""

    @classmethod
    def parameters(cls, kind: inspect._ParameterKind) -> list[inspect.Parameter]:
        """The group's options as the parameters Typer reads, in declaration order."""
        hints = get_type_hints(cls, include_extras=True)
        return [
            inspect.Parameter(f.name, kind, default=f.default, annotation=hints[f.name])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        ]

    def values(self) -> dict[str, Any]:
        """The parsed options by parameter name (what :func:`cachedoctor.cli.settings.resolve` takes)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class DatasetOptions(OptionGroup):
    """Which trainer layout maps items to cache files, and its dataset config."""

    layout: LayoutOption = LayoutChoice.AUTO
    config: ConfigOption = None


@dataclasses.dataclass(frozen=True)
class KohyaOptions(OptionGroup):
    """kohya's dataset config and bucket settings, for the commands that check buckets."""

    kohya_config: KohyaConfigOption = None
    resolution: ResolutionOption = None
    enable_bucket: EnableBucketOption = None
    min_bucket_reso: MinBucketResoOption = None
    max_bucket_reso: MaxBucketResoOption = None
    bucket_reso_steps: BucketResoStepsOption = None
    bucket_no_upscale: BucketNoUpscaleOption = None


@dataclasses.dataclass(frozen=True)
class TrainerPathOptions(OptionGroup):
    """What a trainer config's placeholders stand for; handed to the layouts, not a setting."""

    model_family: ModelFamilyOption = None
    output_dir: OutputDirOption = None


@dataclasses.dataclass(frozen=True)
class DescriptionOptions(OptionGroup):
    """The dataset description whose cache folders the ``quarantine`` commands search."""

    config: ConfigOption = None
    kohya_config: Annotated[
        str | None,
        typer.Option(
            "--kohya-config",
            metavar="FILE",
            help="kohya sd-scripts dataset config (TOML): the quarantines of its image folders.",
        ),
    ] = None
    manifest: ManifestOption = None


@dataclasses.dataclass(frozen=True)
class SelectionOptions(OptionGroup):
    """Which files a scan leaves out, and the state database that lets a rescan skip unchanged ones."""

    exclude: ExcludeOption = None
    state: StateOption = None
    no_state: NoStateOption = False


@dataclasses.dataclass(frozen=True)
class TrainingRunOptions(OptionGroup):
    """The training run's GPUs and batch size, to predict rank imbalance."""

    world_size: WorldSizeOption = None
    batch_size: BatchSizeOption = None


@dataclasses.dataclass(frozen=True)
class TerminalOptions(OptionGroup):
    """Colour and how much is said (``Environment.configure`` takes them)."""

    color: ColorOption = ColorChoice.AUTO
    quiet: QuietOption = False
    verbose: VerboseOption = False


@dataclasses.dataclass(frozen=True)
class ProgressOptions(OptionGroup):
    """How progress is shown on stderr (``cli/progress.py``)."""

    progress: ProgressOption = None
    progress_interval: ProgressIntervalOption = None


@dataclasses.dataclass(frozen=True)
class S3Options(OptionGroup):
    """How ``s3://`` targets are reached (every command that takes a target)."""

    s3_endpoint_url: S3EndpointUrlOption = None
    s3_profile: S3ProfileOption = None
    s3_region: S3RegionOption = None


@dataclasses.dataclass(frozen=True)
class RepairOutputOptions(OptionGroup):
    """What ``repair`` and ``recover`` write: text for people or one JSON document, and where."""

    fmt: RepairFormatOption = RepairFormat.TEXT
    output: RepairOutputOption = None


#: Every group, for the tests that hold commands to them.
GROUPS: tuple[type[OptionGroup], ...] = (
    DatasetOptions,
    KohyaOptions,
    DescriptionOptions,
    TrainerPathOptions,
    SelectionOptions,
    TrainingRunOptions,
    TerminalOptions,
    ProgressOptions,
    S3Options,
    RepairOutputOptions,
)


def with_option_groups(command: _Command) -> _Command:
    """``command`` as Typer should see it: each parameter annotated with an :class:`OptionGroup`
    stands for the group's options, in its place; the command gets the group object."""
    hints = get_type_hints(command, include_extras=True)
    signature = inspect.signature(command)
    shown: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[OptionGroup], list[str]]] = {}
    for parameter in signature.parameters.values():
        kind = hints.get(parameter.name, parameter.annotation)
        if isinstance(kind, type) and issubclass(kind, OptionGroup):
            options = kind.parameters(parameter.kind)
            groups[parameter.name] = (kind, [option.name for option in options])
            shown += options
        else:
            shown.append(parameter.replace(annotation=kind))
    names = [parameter.name for parameter in shown]
    if len(set(names)) != len(names):
        raise TypeError(f"{command.__name__}: an option group repeats a parameter name: {names}")

    @functools.wraps(command)
    def parsed(*args: Any, **kwargs: Any) -> Any:
        for name, (kind, options) in groups.items():
            kwargs[name] = kind(**{option: kwargs.pop(option) for option in options})
        return command(*args, **kwargs)

    parsed.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
    parsed.__annotations__ = {p.name: p.annotation for p in shown} | {"return": hints.get("return")}
    return parsed  # type: ignore[return-value]


__all__ = [
    "GROUPS",
    "DatasetOptions",
    "DescriptionOptions",
    "KohyaOptions",
    "OptionGroup",
    "ProgressOptions",
    "RepairOutputOptions",
    "S3Options",
    "SelectionOptions",
    "TerminalOptions",
    "TrainerPathOptions",
    "TrainingRunOptions",
    "with_option_groups",
]
