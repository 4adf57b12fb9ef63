"""The one mapping from resolved :class:`~cachedoctor.settings.Settings` to the core's options.

``scan``, ``repair``, ``recover`` and ``manifest build`` (and :func:`cachedoctor.api.audit`) all
build their ``ScanOptions`` and ``LayoutOptions`` here, so ``exclude``, ``state``, ``sample``,
``workers`` and ``file-timeout`` cannot mean one thing to ``scan`` and another to ``repair`` (they
did: repair's own scan once ignored ``exclude`` and planned rewrites of excluded files).

``workers`` is always the number of *reader* processes of a scan. ``repair --workers`` is a
different knob, the number of *recompute* processes (``RepairOptions.workers``); repair's scans
take their readers from the settings (``CACHEDOCTOR_WORKERS``, ``workers =`` in the config file).

The scan and layout modules are imported inside the functions: resolving settings (``settings
show``) must not pay for them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cachedoctor.layouts import LayoutName, LayoutOptions
    from cachedoctor.scan import ScanOptions
    from cachedoctor.settings import Settings
    from cachedoctor.stores.s3 import S3Settings


def state_choice(value: str | bool | None, default: bool | str = True) -> str | None:
    """``ScanOptions.state`` from the setting: a path, none (``false``), or when not set the
    per-target database (``default=False``: none; a string: that mode, e.g. ``"existing"``)."""
    from cachedoctor.scan.state.plan import AUTO

    if value is None:
        if isinstance(default, str):
            return default
        return AUTO if default else None
    return None if value is False else os.path.expanduser(str(value))


def scan_options(
    settings: Settings,
    *,
    deep: bool | None = None,
    sample: bool = True,
    default_state: bool | str = True,
    read_only: bool = False,
    inventory: bool = False,
) -> ScanOptions:
    """The scan the settings describe. ``deep`` overrides the setting (``repair`` reads deep
    unless ``--quick``); ``sample=False`` drops a configured ``--sample`` (repair reads everything
    it may act on); ``default_state`` is the state database when the settings name none: the
    per-folder one (``True``), none (``False``), or ``"existing"``: only where ``scan`` already
    made one, never creating one (repair: it takes unchanged files' deep results from scan's
    database, so the two agree on what is wrong, and a dry run creates nothing).
    ``inventory``: take s3:// listings from the ``inventory`` setting (``scan``; a repair lists
    what it acts on itself, as it is now)."""
    from cachedoctor.scan import ScanOptions
    from cachedoctor.scan.state.sample import Sample

    text = settings.sample.value if sample else None
    return ScanOptions(
        deep=bool(settings.deep.value if deep is None else deep),
        workers=settings.workers.value,
        exclude=tuple(settings.exclude.value),
        state=_read_only(state_choice(settings.state.value, default_state))
        if read_only
        else state_choice(settings.state.value, default_state),
        sample=Sample.parse(text) if text else None,
        file_timeout=settings.file_timeout.value,
        world_size=settings.world_size.value,
        batch_size=settings.batch_size.value,
        s3=s3_settings(settings),
        inventory=settings.inventory.value if inventory else None,
    )


def s3_settings(settings: Settings) -> S3Settings:
    """How s3:// targets are reached: ``--s3-endpoint-url``, ``--s3-profile``, ``--s3-region``
    (each ``None`` when not set: botocore's own chain, ``AWS_ENDPOINT_URL`` included, decides)."""
    from cachedoctor.stores.s3_settings import S3Settings  # not stores.s3: asyncio, ssl

    return S3Settings(
        endpoint_url=settings.s3_endpoint_url.value, region=settings.s3_region.value, profile=settings.s3_profile.value
    )


def layout_name(settings: Settings) -> LayoutName:
    from cachedoctor.layouts import LayoutName

    return LayoutName(settings.layout.value)


def layout_options(
    settings: Settings, model_family: str | None = None, output_dir: str | None = None, *, manifest: bool = True
) -> LayoutOptions:
    """What the layouts need to find the dataset: the trainer's config (``--config``, routed to its
    layout by its content) and the manifest from the settings, the model family and output dir as
    given (they are no settings of their own).
    ``manifest=False`` for ``manifest build``, which writes a manifest rather than reading one."""
    from cachedoctor.layouts import LayoutOptions
    from cachedoctor.layouts.configs import routed

    return routed(
        LayoutOptions(
            config=settings.config.value,
            kohya_config=settings.kohya_config.value,
            kohya_args=kohya_args(settings),
            manifest=settings.manifest.value if manifest else None,
            model_family=model_family,
            output_dir=output_dir,
            s3=s3_settings(settings),
        )
    )


def kohya_args(settings: Settings) -> tuple[tuple[str, Any], ...]:
    """sd-scripts' bucket options that are set (the command line's, the environment's, the file's)."""
    from cachedoctor.settings import KOHYA_BUCKET_OPTIONS

    return tuple(
        (n, getattr(settings, n).value) for n in KOHYA_BUCKET_OPTIONS if getattr(settings, n).value is not None
    )


def targets(settings: Settings) -> list[str]:
    """The settings' paths, absolute (an s3:// URL as it is)."""
    return [p if "://" in p else os.path.abspath(p) for p in settings.paths.value]


__all__ = ["kohya_args", "layout_name", "layout_options", "s3_settings", "scan_options", "state_choice", "targets"]


def _read_only(state: str | None) -> str | None:
    """A dry run's state: whatever database the settings name, read and never written
    (``scan.state.plan.READ_ONLY``, spelled here so the CLI imports no scan code)."""
    if state is None or state.startswith("read-only"):
        return state
    return "read-only" if state in ("auto", "existing") else f"read-only:{state}"
