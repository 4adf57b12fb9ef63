"""cachedoctor's own settings: command line > environment > config file > defaults.

(Not SimpleTuner's ``--config multidatabackend.json``: that names a dataset; this is how
cachedoctor itself is set up for a project.) ``scan``, ``repair``, ``recover`` and
``settings show`` resolve them here, once; ``cachedoctor/options.py`` turns them into the
core's option objects, so a key means the same thing to every command.

The config file is ``[tool.cachedoctor]`` in the nearest ``pyproject.toml`` that has that table,
or a ``cachedoctor.toml`` (the same keys at top level), found by walking up from the current
folder as black and ruff do; whichever is nearer wins. Paths in it are relative to its folder.
:func:`resolve` records, for every setting, its value and where it came from, so
``cachedoctor settings show`` can say why a scan behaves as it does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# ``X as X``: split out of this module (config_file.py, setting_checks.py), still importable from it
from cachedoctor.config_file import OWN_FILE as OWN_FILE
from cachedoctor.config_file import PYPROJECT, TABLE, ConfigError, ConfigFile, find
from cachedoctor.errors import UsageError
from cachedoctor.setting_checks import LAYOUT_NAMES as LAYOUT_NAMES
from cachedoctor.setting_checks import (
    MAX_BATCH_SIZE,
    MAX_WORLD_SIZE,
    boolean,
    choice,
    endpoint,
    interval,
    inventory_manifest,
    layouts,
    resolution,
    run_size,
    sample_share,
    seconds,
    severity_table,
    state_path,
    string,
    string_list,
    unknown,
    whole_number,
)
from cachedoctor.setting_checks import SEVERITY_VALUES as SEVERITY_VALUES

COMMAND_LINE = "command line"
DEFAULT = "default"
ENV_PREFIX = "CACHEDOCTOR_"

FAIL_ON_VALUES = ("error", "warning", "never")
#: ``--progress``: a bar on a terminal and plain lines in a log (``auto``), or one of them always, or none.
PROGRESS_VALUES = ("auto", "bar", "lines", "none")


@dataclass(frozen=True, slots=True)
class Setting:
    value: Any
    source: str


#: sd-scripts' bucket options, named as its training scripts' options (``--min_bucket_reso``...).
KOHYA_BUCKET_OPTIONS = (
    "resolution",
    "enable_bucket",
    "min_bucket_reso",
    "max_bucket_reso",
    "bucket_reso_steps",
    "bucket_no_upscale",
)


#: How s3:// targets are reached (``stores.s3.S3Settings``), for every command.
S3_SETTINGS = ("s3_endpoint_url", "s3_profile", "s3_region")


@dataclass(frozen=True)
class Settings:
    """Every setting the config file can hold, each with its source."""

    paths: Setting
    config: Setting
    kohya_config: Setting  # sd-scripts dataset TOML
    resolution: Setting  # sd-scripts' bucket options (below the TOML's own values): "W,H"
    enable_bucket: Setting
    min_bucket_reso: Setting
    max_bucket_reso: Setting
    bucket_reso_steps: Setting
    bucket_no_upscale: Setting
    layout: Setting
    manifest: Setting
    fail_on: Setting
    workers: Setting
    deep: Setting
    exclude: Setting
    severity: Setting
    state: Setting  # None: <target>/.cachedoctor/state.sqlite; False: none; else a path
    sample: Setting
    file_timeout: Setting  # seconds to judge one file before it is reported as read-timeout
    allow_empty: Setting  # targets with no cache file (and no dataset entry) pass instead of exit 2
    world_size: Setting  # the training run's ranks (rank-imbalance); None: from the trainer's config
    batch_size: Setting  # its batch size per rank; None: from the trainer's config
    s3_endpoint_url: Setting  # S3-compatible endpoint (MinIO, R2, Ceph); None: AWS_ENDPOINT_URL or AWS
    s3_profile: Setting  # AWS profile for s3:// targets; None: the standard chain
    s3_region: Setting
    inventory: Setting  # an S3 Inventory manifest.json (path or s3:// URL) listing s3:// targets; None: LIST
    progress: Setting  # auto | bar | lines | none (cli/progress.py draws it)
    progress_interval: Setting  # seconds between two progress lines of a stage in a log
    file: str | None = None  # the config file used, if any

    NAMES = (
        "paths",
        "config",
        "kohya_config",
        *KOHYA_BUCKET_OPTIONS,
        "layout",
        "manifest",
        "fail_on",
        "workers",
        "deep",
        "exclude",
        "severity",
        "state",
        "sample",
        "file_timeout",
        "allow_empty",
        "world_size",
        "batch_size",
        *S3_SETTINGS,
        "inventory",
        "progress",
        "progress_interval",
    )

    def items(self) -> list[tuple[str, Setting]]:
        return [(name, getattr(self, name)) for name in self.NAMES]


#: setting name -> (file key, value check, environment variable or None)
_KEYS: dict[str, tuple[str, Callable[[Any], Any], str | None]] = {
    "paths": ("paths", string_list, None),
    "config": ("config", string, "CONFIG"),
    "kohya_config": ("kohya-config", string, "KOHYA_CONFIG"),
    "resolution": ("resolution", lambda v: resolution(v), "RESOLUTION"),
    "enable_bucket": ("enable-bucket", boolean, "ENABLE_BUCKET"),
    "min_bucket_reso": ("min-bucket-reso", whole_number, "MIN_BUCKET_RESO"),
    "max_bucket_reso": ("max-bucket-reso", whole_number, "MAX_BUCKET_RESO"),
    "bucket_reso_steps": ("bucket-reso-steps", whole_number, "BUCKET_RESO_STEPS"),
    "bucket_no_upscale": ("bucket-no-upscale", boolean, "BUCKET_NO_UPSCALE"),
    "layout": ("layout", lambda v: choice(layouts())(v), "LAYOUT"),
    "manifest": ("manifest", string, "MANIFEST"),
    "fail_on": ("fail-on", choice(FAIL_ON_VALUES), "FAIL_ON"),
    "workers": ("workers", whole_number, "WORKERS"),
    "deep": ("deep", boolean, "DEEP"),
    "exclude": ("exclude", string_list, "EXCLUDE"),
    "severity": ("severity", severity_table, None),
    "state": ("state", state_path, "STATE"),
    "sample": ("sample", sample_share, "SAMPLE"),
    "file_timeout": ("file-timeout", seconds, "FILE_TIMEOUT"),
    "allow_empty": ("allow-empty", boolean, "ALLOW_EMPTY"),
    "world_size": ("world-size", run_size(MAX_WORLD_SIZE), "WORLD_SIZE"),
    "batch_size": ("batch-size", run_size(MAX_BATCH_SIZE), "BATCH_SIZE"),
    "s3_endpoint_url": ("s3-endpoint-url", lambda v: endpoint(v), "S3_ENDPOINT_URL"),
    "s3_profile": ("s3-profile", string, "S3_PROFILE"),
    "s3_region": ("s3-region", string, "S3_REGION"),
    "inventory": ("inventory", inventory_manifest, "INVENTORY"),
    "progress": ("progress", choice(PROGRESS_VALUES), "PROGRESS"),
    "progress_interval": ("progress-interval", interval, "PROGRESS_INTERVAL"),
}
_DEFAULTS: dict[str, Any] = {
    "paths": (),
    "config": None,
    "kohya_config": None,
    **dict.fromkeys(KOHYA_BUCKET_OPTIONS),
    "layout": "auto",
    "manifest": None,
    "fail_on": "error",
    "workers": None,
    "deep": False,
    "exclude": (),
    "severity": {},
    "state": None,
    "sample": None,
    "file_timeout": 10.0,
    "allow_empty": False,
    "world_size": None,
    "batch_size": None,
    **dict.fromkeys(S3_SETTINGS),
    "inventory": None,
    "progress": "auto",
    "progress_interval": 30.0,
}
_RELATIVE = (
    "config",
    "kohya_config",
    "manifest",
    "state",
    "inventory",
)  # file paths, relative to the config file's folder


def _from_file(file: ConfigFile) -> dict[str, Any]:
    by_key = {key: name for name, (key, _, _) in _KEYS.items()}
    prefix = TABLE + "." if os.path.basename(file.path) == PYPROJECT else ""
    out: dict[str, Any] = {}
    for key, raw in file.values.items():
        name = by_key.get(key)
        if name is None:
            raise ConfigError(file.path, f"{prefix}{key}: {unknown('key', key, list(by_key))}")
        try:
            value = _KEYS[name][1](raw)
        except ValueError as exc:
            raise ConfigError(file.path, f"{prefix}{key}: {exc}") from None
        if name == "paths":  # s3:// URLs as they are
            value = tuple(p if "://" in p else os.path.normpath(os.path.join(file.folder, p)) for p in value)
        elif name in _RELATIVE and isinstance(value, str) and "://" not in value:  # (an s3:// inventory as it is)
            value = os.path.normpath(os.path.join(file.folder, value))
        out[name] = value
    return out


def _from_environ(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for name, (_, check, var) in _KEYS.items():
        if var is None:
            continue
        raw = environ.get(ENV_PREFIX + var)
        if raw is None or raw.strip() == "":
            continue
        given: str | list[str] = raw
        if name == "exclude":
            given = [p.strip() for p in raw.split(",") if p.strip()]
        try:
            value = check(given)
        except ValueError as exc:
            shown = str(exc) if repr(raw) in str(exc) else f"{raw!r}: {exc}"  # some checks name the value
            raise ConfigError(f"environment {ENV_PREFIX}{var}", shown) from None
        out[name] = (value, f"environment {ENV_PREFIX}{var}")
    return out


def load(cwd: str | None = None, environ: Mapping[str, str] | None = None, **given: Any) -> Settings:
    """The settings a library caller gets for ``cwd`` (default: the current folder), as the
    command line would resolve them with ``given`` typed on it (``deep=True``, ``paths=[...]``)."""
    cwd = os.path.abspath(cwd or os.getcwd())
    here = dict(given)
    if here.get("paths"):  # relative to ``cwd``, as a shell started there would take them
        here["paths"] = [p if "://" in p else os.path.join(cwd, p) for p in here["paths"]]
    for name in _RELATIVE:
        if isinstance(here.get(name), str) and "://" not in here[name]:
            here[name] = os.path.join(cwd, here[name])
    return resolve(here, os.environ if environ is None else environ, cwd)


def checked(name: str, value: Any) -> Any:
    """``value`` of setting ``name`` as a config file would give it (JSON-like: lists, not
    tuples), checked by the file's rule; raises ``ValueError``. ``cachedoctor merge`` checks
    the settings a part recorded with it: a part is untrusted input."""
    if name not in _KEYS:
        raise ValueError(f"{name!r}: no such setting")
    return _KEYS[name][1](value)


#: Command-line values that the parser takes as text and that must be checked as a file's are.
_CLI_CHECKS: dict[str, Callable[[Any], Any]] = {
    "s3_endpoint_url": endpoint,
    "file_timeout": seconds,
    "resolution": resolution,
    "progress_interval": interval,
    "inventory": inventory_manifest,
}


def resolve(cli: Mapping[str, Any], environ: Mapping[str, str], cwd: str) -> Settings:
    """Settings from the command line (``None`` or empty: not given), environment, file, defaults.

    Raises :class:`ConfigError` for a config file or environment variable that cannot be used.
    """
    file = find(cwd)
    from_file = _from_file(file) if file is not None else {}
    from_env = _from_environ(environ)
    resolved: dict[str, Setting] = {}
    for name in Settings.NAMES:
        given = cli.get(name)
        check = _CLI_CHECKS.get(name)  # the same rules as in a file or the environment, whatever the layout
        if check is not None and given is not None:
            try:
                given = check(given)
            except ValueError as exc:
                raise UsageError(f"--{name.replace('_', '-')}: {exc}") from None
        if given is not None and given != () and given != []:
            resolved[name] = Setting(tuple(given) if isinstance(given, list) else given, COMMAND_LINE)
        elif name in from_env:
            resolved[name] = Setting(*from_env[name])
        elif name in from_file and file is not None:
            resolved[name] = Setting(from_file[name], file.source)
        else:
            resolved[name] = Setting(_DEFAULTS[name], DEFAULT)
    return Settings(**resolved, file=file.path if file is not None else None)


def show_value(value: Any) -> str:
    """A setting's value as ``settings show`` prints it."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ", ".join(value) if value else "(none)"
    if isinstance(value, dict):
        return ", ".join(f"{k} = {v}" for k, v in value.items()) if value else "(none)"
    return str(getattr(value, "value", value))
