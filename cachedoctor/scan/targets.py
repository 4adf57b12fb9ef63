"""Scan targets that name a store location rather than a local path (``s3://bucket/prefix``,
``gs://...``): each resolved to the store that holds it and what it names there.

A target is resolved by its first listing page (which is also the first page of its walk):
keys under it make it a prefix; none, and a HEAD says whether the URL names one object
(``s3://bucket/latents/x.pt``) or nothing (an empty prefix: nothing to check, like an empty
folder). A missing bucket or refused credentials stop the scan here, in one line, before any
read. With ``--inventory``, a prefix the inventory lists keys under is resolved by it instead,
and sends no request (``inventory_targets.py``). Local paths are checked by
``walk.check_targets`` (a file system says at once what a path is), and walked by ``walk.walk``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

from cachedoctor.stores.interface import Location, ObjectInfo, Store

if TYPE_CHECKING:
    from cachedoctor.scan.inventory_targets import Inventoried
    from cachedoctor.stores.s3 import S3Settings

PREFIX, OBJECT, EMPTY = "prefix", "object", "empty"


@dataclass(slots=True)
class Target:
    """One target, resolved: its store, what it names, and its listing (started)."""

    url: str
    location: Location
    store: Store
    kind: str  # PREFIX, OBJECT or EMPTY
    listing: Iterator[ObjectInfo] = field(default_factory=lambda: iter(()))
    #: With ``--inventory``: where the listing came from (``inventory_targets.py``); ``None``: a LIST.
    inventory: Inventoried | None = None


def resolve_target(url: str, store: Store) -> Target:
    """Send the target's first listing request (and a HEAD when it lists nothing)."""
    location = Location.parse(url)
    listing = store.list(location)
    first = next(listing, None)
    if first is not None:
        return Target(location.url, location, store, PREFIX, chain([first], listing))
    if location.key:
        info = store.head(location.url)
        if info is not None:
            return Target(location.url, location, store, OBJECT, iter([info]))
    return Target(location.url, location, store, EMPTY)


def open_targets(
    urls: list[str],
    s3: S3Settings | None,
    known: Mapping[str, S3Settings] | None = None,
    inventory: str | None = None,
) -> list[Target]:
    """Each target resolved, reached with the settings a dataset's config gives for it
    (``known``: its endpoint and keys), else with ``s3`` (the command line, settings file, or
    the standard chain). With ``inventory`` (a manifest.json), a prefix the inventory lists
    keys under takes its listing from it and sends no LIST (``inventory_targets.py``)."""
    from cachedoctor.stores.connect import store_for
    from cachedoctor.stores.interface import RemoteError, TransientError

    known = known or {}
    listed = {}
    if inventory is not None:
        from cachedoctor.scan.inventory_targets import inventory_listings

        listed = inventory_listings(urls, inventory, s3)
    targets = []
    for url in urls:
        try:
            store = store_for(url, known.get(url, s3))
            from_inventory = listed.get(url)
            if from_inventory is not None and from_inventory.listing is not None:
                location = Location.parse(url)
                targets.append(
                    Target(location.url, location, store, PREFIX, from_inventory.listing, from_inventory.source)
                )
                continue
            targets.append(resolve_target(url, store))
            if from_inventory is not None:
                targets[-1].inventory = from_inventory.source  # (not covered: listed by LIST)
        except TransientError as exc:  # a HEAD of a target that names one object, still failing
            raise RemoteError(url, f"cannot be read ({str(exc).removeprefix(url + ': ')}); try again later") from None
    return targets


__all__ = ["EMPTY", "OBJECT", "PREFIX", "Target", "open_targets", "resolve_target"]
