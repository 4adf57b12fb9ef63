"""Finding and reading cachedoctor's config file: ``[tool.cachedoctor]`` in the nearest
``pyproject.toml`` that has that table, or a ``cachedoctor.toml``, walking up as black and ruff do.

Split from ``settings.py``, which checks the keys and merges them with the other sources; this
only finds the file and reads its TOML, with one line (exit 2) for a file that cannot be used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from cachedoctor import toml
from cachedoctor.errors import PathError

PYPROJECT = "pyproject.toml"
OWN_FILE = "cachedoctor.toml"
TABLE = "tool.cachedoctor"


class ConfigError(PathError):
    """A config file or environment variable that cannot be used (exit 2, one line)."""


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
