"""TOML, loaded on first use: ``tomllib`` (``tomli`` before Python 3.11) costs a few
milliseconds to import, and most runs read no TOML file at all."""

from __future__ import annotations

import sys
from typing import IO, Any


def load(handle: IO[bytes]) -> dict[str, Any]:
    """``tomllib.load``; raises :class:`DecodeError` (``tomllib.TOMLDecodeError``) on bad TOML."""
    return _tomllib().load(handle)


def decode_error() -> type[ValueError]:
    """``tomllib.TOMLDecodeError``, for an ``except`` clause."""
    error: type[ValueError] = _tomllib().TOMLDecodeError
    return error


def _tomllib() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib
