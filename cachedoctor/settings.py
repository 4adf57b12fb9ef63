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

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachedoctor import toml
from cachedoctor.errors import PathError, UsageError

COMMAND_LINE = "command line"
DEFAULT = "default"
PYPROJECT = "pyproject.toml"
OWN_FILE = "cachedoctor.toml"
TABLE = "tool.cachedoctor"
ENV_PREFIX = "CACHEDOCTOR_"

FAIL_ON_VALUES = ("error", "warning", "never")
#: ``--progress``: a bar on a terminal and plain lines in a log (``auto``), or one of them always, or none.
PROGRESS_VALUES = ("auto", "bar", "lines", "none")
SEVERITY_VALUES = ("error", "warning", "info")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _unknown(what: str, name: str, known: list[str]) -> str:
    """``unknown key; did you mean 'workers'?`` (difflib, as ``explain`` suggests kinds), or the list of known names."""
    close = difflib.get_close_matches(name.replace("_", "-"), known, n=1, cutoff=0.6)
    if close:
        return f"unknown {what}; did you mean {close[0]!r}?"
    return f"unknown {what} (known: {', '.join(known)})"


class ConfigError(PathError):
    """A config file or environment variable that cannot be used (exit 2, one line)."""


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


#: How s3:// targets are reached (``remote.s3.S3Settings``), for every command.
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
        "progress",
        "progress_interval",
    )

    def items(self) -> list[tuple[str, Setting]]:
        return [(name, getattr(self, name)) for name in self.NAMES]


@dataclass(frozen=True)
class ConfigFile:
    path: str
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return os.path.dirname(self.path)

    @property
    def source(self) -> str:
        return f"{self.path}:{TABLE}" if os.path.basename(self.path) == PYPROJECT else self.path


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return toml.load(f)
    except toml.decode_error() as exc:
        raise ConfigError(path, f"not valid TOML ({exc}); fix the file") from None
    except RecursionError:
        raise ConfigError(path, "TOML nested too deeply to read; fix the file") from None
    except ValueError as exc:  # e.g. an integer too long to convert
        raise ConfigError(path, f"not valid TOML ({exc}); fix the file") from None
    except OSError as exc:
        raise ConfigError(path, f"cannot read ({exc.strerror or exc})") from None


def find(cwd: str) -> ConfigFile | None:
    """The nearest config: a ``cachedoctor.toml``, or a ``pyproject.toml`` with the table."""
    folder = os.path.abspath(cwd)
    while True:
        own = os.path.join(folder, OWN_FILE)
        if os.path.isfile(own):
            return ConfigFile(own, _load(own))
        if os.path.isdir(own):
            raise ConfigError(own, f"is a folder, not a config file; rename it or make it a {OWN_FILE} file")
        project = os.path.join(folder, PYPROJECT)
        if os.path.isfile(project):
            table = _load(project).get("tool", {})
            table = table.get("cachedoctor") if isinstance(table, dict) else None
            if table is not None:
                if not isinstance(table, dict):
                    raise ConfigError(project, f"{TABLE}: must be a table")
                return ConfigFile(project, table)
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


# --- value checks: each returns the clean value or raises ValueError with what was expected ---


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def _str_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("expected a list of non-empty strings")
    return tuple(value)


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value.lower()

    return check


#: The largest run the rank simulation takes (its per-rank tables hold one entry a rank): the
#: largest training clusters are ~10**5 GPUs.
MAX_WORLD_SIZE = 1 << 17
MAX_BATCH_SIZE = 1 << 20


def _run_size(limit: int) -> Any:
    def convert(value: Any) -> int:
        number = _workers(value)
        if number > limit:
            raise ValueError(f"expected a whole number from 1 to {limit}")
        return number

    return convert


def _workers(value: Any) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError("expected a whole number of at least 1") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def _resolution(value: Any) -> str:
    """sd-scripts' resolution: ``512``, ``"512"``, ``"512,768"`` or ``[512, 768]``, as ``"W,H"``."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value, value]
    elif isinstance(value, str):
        value = [p.strip() for p in value.split(",")]
        value = value * 2 if len(value) == 1 else value
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("expected a size in pixels: 1024 or 1024,768 (width,height)")
    if any(isinstance(v, bool) for v in value):
        raise ValueError("expected a size in pixels: 1024 or 1024,768 (width,height)")
    try:
        sides = [_workers(v) for v in value]
    except ValueError:
        raise ValueError("expected a size in pixels: 1024 or 1024,768 (width,height)") from None
    return f"{sides[0]},{sides[1]}"


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("expected true or false")


#: ``layouts.LayoutName``'s values, kept here so that resolving settings imports no layout (a test
#: keeps the two equal).
LAYOUT_NAMES = (
    "auto",
    "simpletuner",
    "kohya",
    "onetrainer",
    "musubi",
    "ai-toolkit",
    "diffusion-pipe",
    "manifest",
    "none",
)


def _layouts() -> tuple[str, ...]:
    return LAYOUT_NAMES


def _severity(value: Any) -> dict[str, str]:
    from cachedoctor.explain import kinds

    KINDS = kinds()  # the checks import no reader or layout: settings show stays light

    if not isinstance(value, dict):
        raise ValueError("expected a table of kind = severity")
    out = {}
    for kind, severity in value.items():
        if kind not in KINDS:
            raise ValueError(_unknown(f"kind {kind!r}", kind, list(KINDS)))
        if not isinstance(severity, str) or severity.lower() not in SEVERITY_VALUES:
            raise ValueError(f"{kind}: expected one of {', '.join(SEVERITY_VALUES)}")
        out[kind] = severity.lower()
    return out


def _state(value: Any) -> str | bool:
    """A path, or false (no state database)."""
    if value is False or (isinstance(value, str) and value.strip().lower() in _FALSE):
        return False
    if isinstance(value, str) and value.strip():
        return os.path.expanduser(value.strip())
    raise ValueError("expected a path for the state database, or false for none")


def _seconds(value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError("expected a number of seconds greater than 0") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86400:
        raise ValueError("expected a number of seconds greater than 0 and under 86400 (a day)")
    return float(value)


def _interval(value: Any) -> float:
    """Seconds between progress lines: 0 (every update) up to a day."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError("expected a number of seconds from 0 up to 86400") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86400:
        raise ValueError("expected a number of seconds from 0 up to 86400")
    return float(value)


def _sample(value: Any) -> str:
    from cachedoctor.scan.state.sample import Sample

    if not isinstance(value, str):
        raise ValueError('expected a share such as "5%" or "3/10"')
    return Sample.parse(value).text


def _endpoint(value: Any) -> str:
    if not isinstance(value, str) or not value.strip().startswith(("http://", "https://")):
        raise ValueError("expected an endpoint URL such as https://minio.example:9000")
    return value.strip()


#: setting name -> (file key, value check, environment variable or None)
_KEYS: dict[str, tuple[str, Callable[[Any], Any], str | None]] = {
    "paths": ("paths", _str_list, None),
    "config": ("config", _str, "CONFIG"),
    "kohya_config": ("kohya-config", _str, "KOHYA_CONFIG"),
    "resolution": ("resolution", lambda v: _resolution(v), "RESOLUTION"),
    "enable_bucket": ("enable-bucket", _bool, "ENABLE_BUCKET"),
    "min_bucket_reso": ("min-bucket-reso", _workers, "MIN_BUCKET_RESO"),
    "max_bucket_reso": ("max-bucket-reso", _workers, "MAX_BUCKET_RESO"),
    "bucket_reso_steps": ("bucket-reso-steps", _workers, "BUCKET_RESO_STEPS"),
    "bucket_no_upscale": ("bucket-no-upscale", _bool, "BUCKET_NO_UPSCALE"),
    "layout": ("layout", lambda v: _choice(_layouts())(v), "LAYOUT"),
    "manifest": ("manifest", _str, "MANIFEST"),
    "fail_on": ("fail-on", _choice(FAIL_ON_VALUES), "FAIL_ON"),
    "workers": ("workers", _workers, "WORKERS"),
    "deep": ("deep", _bool, "DEEP"),
    "exclude": ("exclude", _str_list, "EXCLUDE"),
    "severity": ("severity", _severity, None),
    "state": ("state", _state, "STATE"),
    "sample": ("sample", _sample, "SAMPLE"),
    "file_timeout": ("file-timeout", _seconds, "FILE_TIMEOUT"),
    "allow_empty": ("allow-empty", _bool, "ALLOW_EMPTY"),
    "world_size": ("world-size", _run_size(MAX_WORLD_SIZE), "WORLD_SIZE"),
    "batch_size": ("batch-size", _run_size(MAX_BATCH_SIZE), "BATCH_SIZE"),
    "s3_endpoint_url": ("s3-endpoint-url", lambda v: _endpoint(v), "S3_ENDPOINT_URL"),
    "s3_profile": ("s3-profile", _str, "S3_PROFILE"),
    "s3_region": ("s3-region", _str, "S3_REGION"),
    "progress": ("progress", _choice(PROGRESS_VALUES), "PROGRESS"),
    "progress_interval": ("progress-interval", _interval, "PROGRESS_INTERVAL"),
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
    "progress": "auto",
    "progress_interval": 30.0,
}
_RELATIVE = ("config", "kohya_config", "manifest", "state")  # file paths, relative to the config file's folder


def _from_file(file: ConfigFile) -> dict[str, Any]:
    by_key = {key: name for name, (key, _, _) in _KEYS.items()}
    prefix = TABLE + "." if os.path.basename(file.path) == PYPROJECT else ""
    out: dict[str, Any] = {}
    for key, raw in file.values.items():
        name = by_key.get(key)
        if name is None:
            raise ConfigError(file.path, f"{prefix}{key}: {_unknown('key', key, list(by_key))}")
        try:
            value = _KEYS[name][1](raw)
        except ValueError as exc:
            raise ConfigError(file.path, f"{prefix}{key}: {exc}") from None
        if name == "paths":  # s3:// URLs as they are
            value = tuple(p if "://" in p else os.path.normpath(os.path.join(file.folder, p)) for p in value)
        elif name in _RELATIVE and isinstance(value, str):
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
        if isinstance(here.get(name), str):
            here[name] = os.path.join(cwd, here[name])
    return resolve(here, os.environ if environ is None else environ, cwd)


#: Command-line values that the parser takes as text and that must be checked as a file's are.
_CLI_CHECKS: dict[str, Callable[[Any], Any]] = {
    "s3_endpoint_url": _endpoint,
    "file_timeout": _seconds,
    "resolution": _resolution,
    "progress_interval": _interval,
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
