"""Walk remote targets: one paginated LIST per ``s3://bucket/prefix``, grouped into folders.

An object store has no folders; a scan needs them (peer checks compare a folder's files), so
objects are grouped by the dirname of their key, as a trainer that wrote them through a file
system laid them out. The listing comes sorted by key, and every key under ``a/`` lies in one
run of it, so a folder is complete as soon as a key outside it arrives: folders are yielded
while the LIST goes on, and memory holds only the folders on the current key's path.

A target is resolved by its first LIST page (which is also the first page of its walk): keys
under it make it a prefix; none, and a HEAD says whether the URL names one object
(``s3://bucket/latents/x.pt``) or nothing (an empty prefix: nothing to check, like an empty
folder). Keys under ``.cachedoctor/`` (the remote quarantine), ``.git/`` and ``__pycache__/``,
lock names and keys an ``--exclude`` glob matches (relative to the target) are left out unseen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain

from cachedoctor.scan.walk import _SKIP_DIRS, Folder, excluded
from cachedoctor.statedir import is_lock_name
from cachedoctor.stores.interface import Location, ObjectInfo, Store

PREFIX, OBJECT, EMPTY = "prefix", "object", "empty"


@dataclass(slots=True)
class RemoteTarget:
    """One remote target, resolved: its store, what it names, and its listing (started)."""

    url: str
    location: Location
    store: Store
    kind: str  # PREFIX, OBJECT or EMPTY
    listing: Iterator[ObjectInfo] = field(default_factory=lambda: iter(()))


def resolve_target(url: str, store: Store) -> RemoteTarget:
    """Send the target's first LIST request (and a HEAD when it lists nothing). A missing bucket
    or refused credentials raise :class:`~cachedoctor.stores.RemoteError` here, before any read."""
    location = Location.parse(url)
    listing = store.list(location)
    first = next(listing, None)
    if first is not None:
        return RemoteTarget(location.url, location, store, PREFIX, chain([first], listing))
    if location.key:
        info = store.head(location.url)
        if info is not None:
            return RemoteTarget(location.url, location, store, OBJECT, iter([info]))
    return RemoteTarget(location.url, location, store, EMPTY)


def remote_folders(target: RemoteTarget, exclude: tuple[str, ...], infos: dict[str, ObjectInfo]) -> Iterator[Folder]:
    """The target's folders, each with its objects' URLs sorted; each object's listed facts go
    to ``infos`` (URL -> :class:`ObjectInfo`), which the reads take them from."""
    if target.kind == OBJECT:
        for info in target.listing:
            if not excluded(info.url.rsplit("/", 1)[-1], exclude):
                infos[info.url] = info
                yield Folder(info.url.rsplit("/", 1)[0], [info.url])
        return
    root = target.location.url
    cut = len(target.location.key) + 1 if target.location.key else 0
    open_folders: dict[str, list[str]] = {}
    for info in target.listing:
        relative = info.key[cut:]
        if _left_out(relative, exclude):
            continue
        folder = info.url.rsplit("/", 1)[0]
        for done in [f for f in open_folders if f != folder and not folder.startswith(f + "/")]:
            yield Folder(done, open_folders.pop(done))
        infos[info.url] = info
        open_folders.setdefault(folder if len(folder) >= len(root) else root, []).append(info.url)
    for done in sorted(open_folders):
        yield Folder(done, open_folders[done])


def _left_out(relative: str, exclude: tuple[str, ...]) -> bool:
    """Whether a key (relative to its target) is skipped: under a skipped folder name, a lock
    name, or matching an ``--exclude`` glob itself or through one of its folders."""
    parts = relative.split("/")
    if any(part in _SKIP_DIRS for part in parts[:-1]) or is_lock_name(parts[-1]) or not parts[-1]:
        return True
    return bool(exclude) and any(excluded("/".join(parts[: i + 1]), exclude) for i in range(len(parts)))


__all__ = ["EMPTY", "OBJECT", "PREFIX", "RemoteTarget", "remote_folders", "resolve_target"]
