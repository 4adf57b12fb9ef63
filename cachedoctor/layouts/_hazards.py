"""Trainer settings known to lose or corrupt a cache: what a layout finds while it plans.

A :class:`Hazard` is a fact about the configuration (or about the cache folders it names), found
while the layout reads the trainer's files; ``checks/config_hazard.py`` turns each into a
``config-hazard`` finding once the scan knows the run (its world size). Some hazards hold only on
more than one rank (``min_ranks``): the run's ``--world-size`` decides, else the rank count the
trainer's own configuration holds (``config_ranks``), else nothing is said.

The helpers here read what several trainers share: the process and machine counts of an
``accelerate`` config, and the first bytes of a few cache files (gzip or not). They never read
tensor data: planning stays a small fraction of the scan.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

GZIP_MAGIC = b"\x1f\x8b"
#: Cache files whose first bytes are read to tell a gzip-compressed cache from a plain one.
SNIFF_FILES = 16


@dataclass(frozen=True, slots=True)
class Hazard:
    """One dangerous setting: ``path`` is the file holding it (or the cache folder, for a fact
    found on disk), ``setting`` how the file spells it, ``message`` what goes wrong, ``change``
    the setting to change, ``reference`` the public issue thread(s) it comes from."""

    name: str  # stable id, e.g. "vae-cache-clear-each-epoch"
    path: str
    setting: str
    message: str
    change: str
    reference: str
    min_ranks: int = 1  # it holds only for a run of at least this many ranks
    config_ranks: int | None = None  # the rank count the trainer's configuration holds (None: not known)


def truthy(value: Any) -> bool:
    """A JSON/TOML flag as trainers read it: ``true``, ``"true"``, ``1``."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return value is True or (isinstance(value, int) and value == 1)


def count(value: Any) -> int | None:
    """A positive count from a config value (``8``, ``"8"``), or ``None``."""
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def accelerate_counts(path: str | None) -> tuple[int | None, int | None]:
    """``(num_processes, num_machines)`` of an ``accelerate`` config file (YAML or JSON): only
    the two top-level keys are read, so no YAML library is needed."""
    if not path or not os.path.isfile(path):
        return None, None
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        return None, None
    values: dict[str, Any] = {}
    if text.lstrip().startswith("{"):
        try:
            loaded = json.loads(text)
        except (ValueError, RecursionError):
            loaded = {}
        values = loaded if isinstance(loaded, dict) else {}
    else:
        for line in text.splitlines():
            if line[:1].isspace() or ":" not in line:
                continue  # nested keys (deepspeed_config, fsdp_config) are not the run's size
            key, _, value = line.partition(":")
            values[key.strip()] = value.split("#")[0].strip().strip("'\"")
    return count(values.get("num_processes")), count(values.get("num_machines"))


def sniff_gzip(folder: str, suffix: str, limit: int = SNIFF_FILES) -> tuple[int, int]:
    """``(gzip, sampled)``: of the first ``limit`` files named ``*suffix`` below ``folder`` (in
    directory order), how many start with gzip's magic bytes (two bytes read per file)."""
    gzipped = sampled = 0
    stack = [folder]
    while stack and sampled < limit:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:  # directory order, stopping at ``limit``: a folder of a million is not listed whole
            for entry in entries:
                if sampled >= limit:
                    break
                if entry.name.startswith("."):
                    continue  # .cachedoctor/ (state, quarantine) is not the trainer's
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(suffix) and entry.is_file():
                    try:
                        with open(entry.path, "rb") as handle:
                            head = handle.read(2)
                    except OSError:
                        continue
                    sampled += 1
                    gzipped += head == GZIP_MAGIC
    return gzipped, sampled


__all__ = ["GZIP_MAGIC", "Hazard", "accelerate_counts", "count", "sniff_gzip", "truthy"]
