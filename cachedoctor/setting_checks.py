"""Each setting's value check: the clean value from what a config file, the environment or the
command line gave, or ``ValueError`` saying what was expected.

Split from ``settings.py``, which decides where each setting comes from (command line,
environment, file, default); the rules here are the same whichever source gave the value, so a
key means the same thing in ``pyproject.toml``, ``CACHEDOCTOR_*`` and on the command line.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from typing import Any

SEVERITY_VALUES = ("error", "warning", "info")
TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def unknown(what: str, name: str, known: list[str]) -> str:
    """``unknown key; did you mean 'workers'?`` (difflib, as ``explain`` suggests kinds), or the list of known names."""
    close = difflib.get_close_matches(name.replace("_", "-"), known, n=1, cutoff=0.6)
    if close:
        return f"unknown {what}; did you mean {close[0]!r}?"
    return f"unknown {what} (known: {', '.join(known)})"


def string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def string_list(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("expected a list of non-empty strings")
    return tuple(value)


def choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value.lower()

    return check


#: The largest run the rank simulation takes (its per-rank tables hold one entry a rank): the
#: largest training clusters are ~10**5 GPUs.
MAX_WORLD_SIZE = 1 << 17
MAX_BATCH_SIZE = 1 << 20


def run_size(limit: int) -> Any:
    def convert(value: Any) -> int:
        number = whole_number(value)
        if number > limit:
            raise ValueError(f"expected a whole number from 1 to {limit}")
        return number

    return convert


def whole_number(value: Any) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError("expected a whole number of at least 1") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def resolution(value: Any) -> str:
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
        sides = [whole_number(v) for v in value]
    except ValueError:
        raise ValueError("expected a size in pixels: 1024 or 1024,768 (width,height)") from None
    return f"{sides[0]},{sides[1]}"


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
        return value.strip().lower() in TRUE
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


def layouts() -> tuple[str, ...]:
    return LAYOUT_NAMES


def severity_table(value: Any) -> dict[str, str]:
    from cachedoctor.explain import kinds

    KINDS = kinds()  # the checks import no reader or layout: settings show stays light

    if not isinstance(value, dict):
        raise ValueError("expected a table of kind = severity")
    out = {}
    for kind, severity in value.items():
        if kind not in KINDS:
            raise ValueError(unknown(f"kind {kind!r}", kind, list(KINDS)))
        if not isinstance(severity, str) or severity.lower() not in SEVERITY_VALUES:
            raise ValueError(f"{kind}: expected one of {', '.join(SEVERITY_VALUES)}")
        out[kind] = severity.lower()
    return out


def state_path(value: Any) -> str | bool:
    """A path, or false (no state database)."""
    if value is False or (isinstance(value, str) and value.strip().lower() in FALSE):
        return False
    if isinstance(value, str) and value.strip():
        return os.path.expanduser(value.strip())
    raise ValueError("expected a path for the state database, or false for none")


def seconds(value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError("expected a number of seconds greater than 0") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86400:
        raise ValueError("expected a number of seconds greater than 0 and under 86400 (a day)")
    return float(value)


def interval(value: Any) -> float:
    """Seconds between progress lines: 0 (every update) up to a day."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError("expected a number of seconds from 0 up to 86400") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86400:
        raise ValueError("expected a number of seconds from 0 up to 86400")
    return float(value)


def sample_share(value: Any) -> str:
    from cachedoctor.scan.state.sample import Sample

    if not isinstance(value, str):
        raise ValueError('expected a share such as "5%" or "3/10"')
    return Sample.parse(value).text


def inventory_manifest(value: Any) -> str:
    """An S3 Inventory's manifest.json: a path, or an ``s3://`` URL."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected the path or s3:// URL of an S3 Inventory manifest.json")
    value = value.strip()
    if "://" in value and not value.startswith("s3://"):
        raise ValueError("expected a path or an s3:// URL (S3 Inventory manifests only)")
    return os.path.expanduser(value)


def endpoint(value: Any) -> str:
    if not isinstance(value, str) or not value.strip().startswith(("http://", "https://")):
        raise ValueError("expected an endpoint URL such as https://minio.example:9000")
    return value.strip()
