"""Scan targets listed by an S3 Inventory (``scan --inventory MANIFEST``) instead of LIST.

The inventory is read once for all targets: each row goes to every target whose prefix holds
its key, into that target's external sort (``stores/inventory_sort.py``), so a target gets its
keys sorted, as a LIST would give them, in flat memory, and no LIST of the prefix is sent. A
target in another bucket than the inventory's is refused (one line): the inventory says nothing
of it. A target under which the inventory lists no key (one object named on its own, a prefix
the inventory's filter left out, or one written since) is resolved as without an inventory,
by its first LIST page and a HEAD, and the scan's notes say so.

What changed since the inventory is found by the reads themselves (each is conditional on the
inventory's ETag) and the folders it changed are listed again: ``inventory_relist.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachedoctor.stores.interface import Location, ObjectInfo
from cachedoctor.stores.inventory import read_manifest, rows
from cachedoctor.stores.inventory_model import InventoryError, Manifest
from cachedoctor.stores.inventory_sort import DEFAULT_BOUND, SortedRows

if TYPE_CHECKING:
    from cachedoctor.stores.s3 import S3Settings


@dataclass(slots=True)
class Inventoried:
    """Where a target's listing came from: the inventory (``covered``), or a LIST because the
    inventory lists nothing under it; and how many of its folders were listed again."""

    manifest: str
    date: str
    covered: bool
    relisted: int = 0


@dataclass(slots=True)
class Listed:
    """One target's listing from the inventory (``None``: it lists nothing under the target)."""

    source: Inventoried
    listing: Iterator[ObjectInfo] | None


def inventory_listings(
    urls: list[str], where: str, s3: S3Settings | None, bound: int = DEFAULT_BOUND
) -> dict[str, Listed]:
    """Each target's listing from the inventory at ``where`` (a manifest.json path or URL)."""
    manifest = read_manifest(where, s3)
    locations = {url: _location(url, manifest) for url in urls}
    prefixes = {url: f"{loc.key}/" if loc.key else "" for url, loc in locations.items()}
    sorters = {url: SortedRows(bound) for url in urls}
    try:
        for row in rows(manifest, s3):
            for url, prefix in prefixes.items():
                if row.key.startswith(prefix):
                    sorters[url].add(row)
    except BaseException:
        for sorter in sorters.values():
            sorter.close()
        raise
    out = {}
    for url, sorter in sorters.items():
        covered = sorter.count > 0
        listing = _infos(sorter, manifest.source_bucket) if covered else None
        if not covered:
            sorter.close()
        out[url] = Listed(Inventoried(where, manifest.date, covered), listing)
    return out


def _location(url: str, manifest: Manifest) -> Location:
    location = Location.parse(url)
    if location.scheme != "s3":
        raise InventoryError(url, "--inventory reads an S3 Inventory; scan gs:// targets without it")
    if location.bucket != manifest.source_bucket:
        raise InventoryError(
            url,
            f"the inventory {manifest.where} lists bucket {manifest.source_bucket}, not {location.bucket}; "
            "pass that bucket's inventory, or scan without --inventory",
        )
    return location


def _infos(sorter: SortedRows, bucket: str) -> Iterator[ObjectInfo]:
    for row in sorter.sorted():
        yield row.info(bucket)


__all__ = ["Inventoried", "Listed", "inventory_listings"]
