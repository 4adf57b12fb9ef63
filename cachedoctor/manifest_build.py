"""``cachedoctor manifest build``: record each dataset item's content next to its cache path.

A later ``scan --manifest`` then reports staleness exactly (by xxh3, not by mtime). Local
sources are hashed on a small thread pool in streamed 1 MiB blocks, and rows are written as
they complete in order, so memory stays flat apart from the plan itself.

A remote source (``s3://``, a SimpleTuner ``aws`` dataset) is never read: its row records the
ETag, size and LastModified that a LIST shows (``layouts/_manifest_remote`` says why the ETag is
the content's fingerprint): the plan's own LIST of the bucket where the layout kept them (an
image's), else one LIST per source bucket (a caption's), so a build costs LIST pages, not one
GET per image. Its cache path is kept as the layout names it (a local path, or an ``s3://`` URL).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cachedoctor.atomic import atomic_text
from cachedoctor.errors import PathError
from cachedoctor.layouts._manifest_remote import is_remote, list_sources
from cachedoctor.layouts.interface import DatasetPlan, Expected, mtime_ns
from cachedoctor.layouts.manifest import HASH_WORKERS, file_xxh3
from cachedoctor.stores.interface import Location, ObjectInfo

if TYPE_CHECKING:
    from cachedoctor.stores.s3 import S3Settings

#: A source's facts for its row: (size, mtime_ns, xxh3 or ETag); ``None``: unreadable or gone.
Facts = tuple[int, int, str] | None


@dataclass(frozen=True, slots=True)
class BuildResult:
    rows: int
    unreadable: list[str]


class ManifestWriteError(PathError):
    """The manifest cannot be written where asked (the disk, the folder's permissions)."""


def entries(plan: DatasetPlan) -> Iterator[tuple[str, Expected]]:
    """``(source, entry)`` for every item of the plan, colliding items each on their own row. A
    file that holds several items (a diffusion-pipe shard: its ``sources`` hint) gets one row per
    item, each ``shared`` (they name one file by design) and tracked by its own content."""
    for folder in sorted(plan.expected):
        for path in sorted(plan.expected[folder]):
            for entry in plan.expected[folder][path]:
                if not entry.in_index or not entry.source_exists:
                    continue
                items = dict(entry.hints).get("sources")
                if items:
                    for source in items:
                        yield source, replace(entry, source=source, source_mtime_ns=mtime_ns(source), shared=True)
                    continue
                for source in (entry.source, *entry.also):
                    yield source, entry


def build(
    plan: DatasetPlan,
    output: str,
    *,
    workers: int | None = None,
    exclude: tuple[str, ...] = (),
    s3: S3Settings | None = None,
) -> BuildResult:
    """Write the manifest for ``plan`` to ``output`` atomically (temp file, fsync, rename);
    cache files matching ``exclude`` get no row, as scan and repair leave them out. ``s3``:
    how remote sources are listed where the plan has no settings of its own for their bucket."""
    if exclude:
        from cachedoctor.scan.walk import drop_excluded

        drop_excluded(plan, plan.roots, exclude)
    output = os.path.abspath(output)
    base = os.path.dirname(output)
    pairs = list(entries(plan))
    listed = {s: info for s, e in pairs if (info := _as_listed(s, e)) is not None}
    tracked = [s for s, e in pairs if e.source_mtime_ns is not None and is_remote(s) and s not in listed]
    if tracked:  # remote sources whose facts the plan did not keep: one LIST per bucket
        listed.update(list_sources(tracked, lambda bucket: _settings(plan, bucket, s3)))
    unreadable: list[str] = []
    try:
        with (
            atomic_text(output, prefix=".cachedoctor-manifest-") as out,
            ThreadPoolExecutor(max_workers=workers or HASH_WORKERS) as pool,
        ):
            hashed = pool.map(
                lambda pair: _facts(pair[0] if pair[1].source_mtime_ns is not None else None, listed), pairs
            )
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


def _as_listed(source: str, entry: Expected) -> ObjectInfo | None:
    """The facts of a remote source as the plan's own LIST saw them (its ``etag`` and ``size``
    hints, its LastModified), when the layout kept them."""
    hints = dict(entry.hints)
    if source != entry.source or entry.source_mtime_ns is None or "etag" not in hints or not is_remote(source):
        return None
    return ObjectInfo(source, int(hints["size"]), str(hints["etag"]), entry.source_mtime_ns)


def _settings(plan: DatasetPlan, bucket: str, default: S3Settings | None) -> S3Settings | None:
    """The settings the plan reaches ``bucket`` with (a SimpleTuner dataset's own endpoint and
    keys), else ``default``."""
    for root, settings in plan.remote_settings.items():
        if Location.parse(root).bucket == Location.parse(bucket).bucket:
            return settings
    return default


def _facts(source: str | None, listed: dict[str, ObjectInfo]) -> Facts:
    if source is None:
        return (0, 0, "")
    if is_remote(source):
        info = listed.get(source)
        return None if info is None else (info.size, info.mtime_ns, info.etag)
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
    scaling = dict(entry.hints).get("scaling")
    if scaling is not None and entry.role == "latent":  # how the trainer transforms the latent (a recompute needs it)
        row["scaling"] = scaling
    if entry.shared:
        row["shared"] = True
    if entry.source_mtime_ns is None:  # the layout says the source's content does not decide the entry
        row["track"] = False  # (a caption taken from the file name, a text entry with no caption file)
    else:
        row.update(size=size, mtime_ns=mtime)
        if not is_remote(source):
            row["xxh3"] = digest
        elif digest:  # a store that sends no ETag: the scan falls back to LastModified
            row["etag"] = digest
    return row


def _rel(path: str, base: str) -> str:
    """Relative to the manifest's folder when near it; an ``s3://`` URL as it is."""
    if is_remote(path):
        return path
    try:
        rel = os.path.relpath(path, base)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel
