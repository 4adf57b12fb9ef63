"""OneTrainer's training config for a cache folder: the run's batch size and GPU count.

OneTrainer (23df383) takes one JSON (``scripts/train.py --config-path``) and saves a copy of it,
concepts inline, as ``<workspace_dir>/config/<prefix><timestamp>.json`` at every start
(``GenericTrainer.__save_config_to_workspace``); the defaults put the cache in
``workspace-cache/run`` and that copy in ``workspace/run/config/``. The config that belongs to a
cache is the newest one whose ``cache_dir`` names it, looked for in the cache folder, the folder
above it, and ``<above that>/workspace/*/config/`` (OneTrainer's default pairing). ``cache_dir``
is relative to OneTrainer's working directory, which is not recorded: it is resolved against the
config's folder and its ancestors and the current directory.

What it reads (``modules/util/config/TrainConfig.py``): ``batch_size`` (per GPU), ``multi_gpu``
and ``device_indexes`` (``MultiTrainer.train``: one process per listed device; an empty list
means every visible GPU, which only the training machine knows), and the concepts' ``balancing``.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from stat import S_ISREG
from typing import Any

from cachedoctor.layouts._hazards import count, truthy

#: config files looked at per folder (a workspace keeps one per start)
_MAX_CANDIDATES = 64
#: a training config with its concepts and samples inline is tens of KiB; a bigger JSON beside
#: the cache (a dataset's metadata) is not one, and is not read
_MAX_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class OneTrainerRun:
    path: str
    batch_size: int | None
    world_size: int | None  # None: multi_gpu on every visible GPU (not known here)
    balancing: tuple[str, ...]  # concepts whose balancing is not one pass (REPEATS 1.0)


def find(cache: str) -> OneTrainerRun | None:
    """The newest training config whose ``cache_dir`` is ``cache``, or ``None``."""
    cache = os.path.realpath(cache)
    above = os.path.dirname(cache)
    patterns = (
        os.path.join(cache, "*.json"),
        os.path.join(above, "*.json"),
        os.path.join(os.path.dirname(above), "workspace*", "*", "config", "*.json"),
    )
    candidates: list[tuple[float, str]] = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern))[-_MAX_CANDIDATES:]:
            try:
                stat = os.stat(path)
            except OSError:
                continue
            if S_ISREG(stat.st_mode) and stat.st_size <= _MAX_BYTES:  # a FIFO or a device would block the read
                candidates.append((stat.st_mtime, path))
    for _, path in sorted(candidates, reverse=True):
        raw = _load(path)
        if raw is not None and _names(raw.get("cache_dir"), path, cache):
            return _run(path, raw)
    return None


def _load(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.loads(handle.read(_MAX_BYTES + 1))  # bounded, even if the file grew since its stat
    except (OSError, ValueError, RecursionError):
        return None
    return raw if isinstance(raw, dict) and "batch_size" in raw else None


def _names(cache_dir: Any, config: str, cache: str) -> bool:
    if not isinstance(cache_dir, str) or not cache_dir:
        return False
    if os.path.isabs(cache_dir):
        return os.path.realpath(cache_dir) == cache
    bases = [os.getcwd()]
    folder = os.path.dirname(os.path.abspath(config))
    while True:
        bases.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return any(os.path.realpath(os.path.join(base, cache_dir)) == cache for base in bases)


def _run(path: str, raw: dict[str, Any]) -> OneTrainerRun:
    world: int | None = 1
    if truthy(raw.get("multi_gpu")):
        devices = [d for d in str(raw.get("device_indexes") or "").split(",") if d.strip()]
        world = len(devices) or None
    balancing = []
    for i, concept in enumerate(raw.get("concepts") or []):
        if not isinstance(concept, dict) or concept.get("enabled") is False:
            continue
        strategy = str(concept.get("balancing_strategy") or "REPEATS")
        if strategy != "REPEATS" or _number(concept.get("balancing", 1.0)) != 1.0:
            balancing.append(str(concept.get("name") or concept.get("path") or f"concept {i}"))
    return OneTrainerRun(path, count(raw.get("batch_size")), world, tuple(balancing))


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
