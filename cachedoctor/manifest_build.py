"""``cachedoctor manifest build``: record each dataset item's content next to its cache path.

A later ``scan --manifest`` then reports staleness exactly (by xxh3, not by mtime). Sources are
hashed on a small thread pool in streamed 1 MiB blocks, and rows are written as they complete
in order, so memory stays flat apart from the plan itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cachedoctor.atomic import atomic_text
from cachedoctor.errors import PathError
from cachedoctor.layouts.interface import DatasetPlan, Expected
from cachedoctor.layouts.manifest import HASH_WORKERS, file_xxh3


@dataclass(frozen=True, slots=True)
class BuildResult:
    rows: int
    unreadable: list[str]


class ManifestWriteError(PathError):
    """The manifest cannot be written where asked (the disk, the folder's permissions)."""


def entries(plan: DatasetPlan) -> Iterator[tuple[str, Expected]]:
    """``(source, entry)`` for every item of the plan, colliding items each on their own row."""
    for folder in sorted(plan.expected):
        for path in sorted(plan.expected[folder]):
            for entry in plan.expected[folder][path]:
                if not entry.in_index or not entry.source_exists:
                    continue
                for source in (entry.source, *entry.also):
                    yield source, entry


def build(plan: DatasetPlan, output: str, *, workers: int | None = None, exclude: tuple[str, ...] = ()) -> BuildResult:
    """Write the manifest for ``plan`` to ``output`` atomically (temp file, fsync, rename);
    cache files matching ``exclude`` get no row, as scan and repair leave them out."""
    if exclude:
        from cachedoctor.scan.walk import drop_excluded

        drop_excluded(plan, plan.roots, exclude)
    output = os.path.abspath(output)
    base = os.path.dirname(output)
    pairs = list(entries(plan))
    unreadable: list[str] = []
    try:
        with (
            atomic_text(output, prefix=".cachedoctor-manifest-") as out,
            ThreadPoolExecutor(max_workers=workers or HASH_WORKERS) as pool,
        ):
            hashed = pool.map(_facts, (s if e.source_mtime_ns is not None else None for s, e in pairs))
            for (source, entry), facts in zip(pairs, hashed, strict=False):
                if facts is None:
                    unreadable.append(source)
                    continue
                out.write(json.dumps(_row(base, source, entry, facts)) + "\n")
    except OSError as exc:
        raise ManifestWriteError(
            output, f"cannot write the manifest ({exc.strerror or exc}); nothing was changed"
        ) from None
    return BuildResult(len(pairs) - len(unreadable), unreadable)


def _facts(source: str | None) -> tuple[int, int, str] | None:
    if source is None:
        return (0, 0, "")
    try:
        st = os.stat(source)
    except OSError:
        return None
    digest = file_xxh3(source)
    return None if digest is None else (st.st_size, st.st_mtime_ns, digest)


def _row(base: str, source: str, entry: Expected, facts: tuple[int, int, str]) -> dict[str, Any]:
    size, mtime, digest = facts
    row: dict[str, Any] = {"source": _rel(source, base), "cache": _rel(entry.path, base), "role": entry.role}
    if entry.shape is not None:
        row["shape"] = list(entry.shape)
    if entry.latent_hw is not None:
        row["latent_hw"] = list(entry.latent_hw)
    if entry.latent_key is not None:
        row["key"] = entry.latent_key
    if entry.shared:
        row["shared"] = True
    if entry.source_mtime_ns is None:  # the layout says the source's content does not decide the entry
        row["track"] = False  # (a caption taken from the file name, a text entry with no caption file)
    else:
        row.update(size=size, mtime_ns=mtime, xxh3=digest)
    return row


def _rel(path: str, base: str) -> str:
    try:
        rel = os.path.relpath(path, base)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel
