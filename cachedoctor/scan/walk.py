"""Walk scan targets folder by folder, following directory symlinks but never a loop.

Folders are yielded whole (their files sorted) because peer checks compare a folder's files
with each other; memory is bounded by the largest folder, not by the cache.

Entries that are neither a folder nor a regular file are looked at only when their name claims
a cache file: a symlink that leads nowhere (dangling, or a loop) is listed with the files, to be
judged as a ``broken-link`` without being opened; a FIFO, socket or device is listed apart
(``Folder.special``), never opened, and the scan counts it as skipped and says so. Under any
other name they are foreign and left alone, as they always were.
"""

from __future__ import annotations

import errno
import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachedoctor.cachenames import claims_cache, special_type
from cachedoctor.errors import PathError
from cachedoctor.statedir import LOCK_SUFFIX, STATE_DIR, is_lock_name

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import DatasetPlan
    from cachedoctor.scan.targets import Target
    from cachedoctor.stores.interface import ObjectInfo

_SKIP_DIRS = frozenset({STATE_DIR, ".git", "__pycache__"})


class TargetError(PathError):
    """A scan target cannot be scanned at all (missing, unreadable, not a file or folder)."""


@dataclass(frozen=True, slots=True)
class Folder:
    path: str
    files: list[str]  # absolute paths or URLs (broken links under a cache name included)
    special: list[tuple[str, str]] = field(default_factory=list)  # (path, "FIFO"...): never opened
    #: The files' facts as a listing gave them (size, version, time), one per file, for a
    #: folder of a store whose listing is its change test (``Capabilities.server_versions``):
    #: its plan and reads need no other request. ``None``: a local folder, stat'ed when planned.
    listed: tuple[ObjectInfo, ...] | None = None


@dataclass(frozen=True, slots=True)
class WalkError:
    path: str
    message: str


def is_under(path: str, folder: str) -> bool:
    """Whether ``path`` is strictly inside ``folder``."""
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def check_targets(targets: list[str]) -> list[str]:
    """Absolute targets, or :class:`TargetError` for the first one that cannot be scanned."""
    out = []
    for target in targets:
        path = os.path.abspath(target)
        if not os.path.exists(path):
            raise TargetError(path, "no such file or folder; check the path (and that its disk is mounted)")
        if os.path.isdir(path):
            if not os.access(path, os.R_OK | os.X_OK):
                raise TargetError(path, "folder is not readable; fix its permissions or run as its owner")
        elif not os.path.isfile(path):
            raise TargetError(path, "neither a regular file nor a folder")
        elif not os.access(path, os.R_OK):
            raise TargetError(path, "file is not readable; fix its permissions or run as its owner")
        out.append(path)
    return out


def merge_aliases(roots: list[str]) -> tuple[list[str], dict[str, str]]:
    """``roots`` less those that lead (through symlinks) to files another root already covers,
    and for each one left out the path it is scanned as (under a kept root).

    The walk never reads a folder twice (it stops at one it has seen), so without this a target
    such as a symlink to a subfolder of another target would be found empty: "no cache files
    here", exit 2, although its files were scanned. A root is kept unless another one holds it
    (or, the same place twice, an earlier one is it).
    """
    real = [os.path.realpath(r) for r in roots]

    def holds(i: int, j: int) -> bool:  # does root i cover root j?
        return i != j and (is_under(real[j], real[i]) or (real[i] == real[j] and i < j))

    kept = [j for j in range(len(roots)) if not any(holds(i, j) for i in range(len(roots)))]
    merged: dict[str, str] = {}
    for j, root in enumerate(roots):
        if j not in kept:
            i = next(i for i in kept if holds(i, j) or real[i] == real[j])
            merged[root] = roots[i] if real[i] == real[j] else os.path.join(roots[i], os.path.relpath(real[j], real[i]))
    return [roots[j] for j in kept], merged


def alias_notes(merged: dict[str, str]) -> list[str]:
    """``LINK: same files as DIR/sub, scanned once`` for each target another one covered under
    another name (a nested folder or the same path given twice needs no note)."""
    return [
        f"{root}: same {'files' if os.path.isdir(root) else 'file'} as {same}, scanned once"
        for root, same in merged.items()
        if same != root
    ]


def excluded(relative: str, patterns: tuple[str, ...]) -> bool:
    """Whether a path (relative to its scan target, ``/``-separated) or its base name matches a glob."""
    name = relative.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(relative, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def drop_excluded(plan: DatasetPlan, roots: list[str], patterns: tuple[str, ...]) -> None:
    """Remove from ``plan`` the expected entries the walk of ``roots`` leaves out (scan, repair
    and ``manifest build``), so that an excluded file is not reported missing instead."""
    for folder, entries in list(plan.expected.items()):
        for path in [p for p in entries if _excluded_under(p, roots, patterns)]:
            del entries[path]
        if not entries:
            del plan.expected[folder]


def _excluded_under(path: str, roots: list[str], patterns: tuple[str, ...]) -> bool:
    """Whether ``path``, or a folder on the way to it from the nearest root, matches a glob."""
    if not patterns:
        return False
    base = max((r for r in roots if is_under(path, r)), key=len, default=None)
    if base is None:
        return excluded(os.path.basename(path), patterns)
    parts = os.path.relpath(path, base).replace(os.sep, "/").split("/")
    return any(excluded("/".join(parts[: i + 1]), patterns) for i in range(len(parts)))


def walk(targets: list[str], errors: list[WalkError], exclude: tuple[str, ...] = ()) -> Iterator[Folder]:
    """Folders under ``targets`` (absolute, checked); unreadable subfolders go to ``errors``.

    Files named on their own are grouped by their folder, so they still have peers, and are
    skipped when a folder target already covers them. Files and folders whose path relative
    to their target, or whose name, matches an ``exclude`` glob are left out unseen.
    """
    folders = [t for t in targets if os.path.isdir(t)]
    named: dict[str, set[str]] = {}
    for target in targets:
        if (
            not os.path.isdir(target)
            and not any(is_under(target, f) for f in folders)
            and not excluded(os.path.basename(target), exclude)
        ):
            named.setdefault(os.path.dirname(target), set()).add(target)
    for folder, chosen in named.items():
        yield Folder(folder, sorted(chosen))
    visited: set[tuple[int, int]] = set()

    def skip(path: str, target: str) -> bool:
        return bool(exclude) and excluded(os.path.relpath(path, target).replace(os.sep, "/"), exclude)

    for target in folders:
        stack = [target]
        while stack:
            folder = stack.pop()
            try:
                st = os.stat(folder)
                if (st.st_dev, st.st_ino) in visited:
                    continue  # a symlink loop or a folder reached twice
                visited.add((st.st_dev, st.st_ino))
                files: list[str] = []
                subdirs: list[str] = []
                special: list[tuple[str, str]] = []
                with os.scandir(folder) as it:
                    for entry in it:
                        try:  # is_file/is_dir first: the one cost per entry of an ordinary folder
                            kind = _FILE if entry.is_file() else _DIR if entry.is_dir() else _kind(entry)
                        except OSError as exc:
                            try:
                                kind = _loop(entry, exc)
                            except OSError:
                                errors.append(WalkError(entry.path, f"cannot stat: {exc.strerror or exc}"))
                                continue
                            if kind == _LEFT_ALONE:
                                continue
                        if kind == _FILE:
                            name = entry.name  # not a lock file (statedir.is_lock_name, inline: once a file)
                            if not (name[:1] == "." and name.endswith(LOCK_SUFFIX)) and not (
                                exclude and skip(entry.path, target)
                            ):
                                files.append(entry.path)
                        elif kind == _DIR:  # follows symlinks; loops stop at ``visited``
                            if entry.name not in _SKIP_DIRS and not skip(entry.path, target):
                                subdirs.append(entry.path)
                        elif claims_cache(entry.name) and not (exclude and skip(entry.path, target)):
                            if kind == _BROKEN_LINK:
                                files.append(entry.path)
                            else:
                                special.append((entry.path, kind))
            except OSError as exc:
                errors.append(WalkError(folder, f"cannot list folder: {exc.strerror or exc}"))
                continue
            files.sort()
            if files or special:
                yield Folder(folder, files, sorted(special))
            stack.extend(sorted(subdirs, reverse=True))


def listed_folders(target: Target, exclude: tuple[str, ...]) -> Iterator[Folder]:
    """The folders of a target whose store lists keys rather than folders (an object store):
    objects grouped by the dirname of their key, as a trainer that wrote them through a file
    system laid them out, since peer checks compare a folder's files. The listing comes sorted
    by key, and every key under ``a/`` lies in one run of it, so a folder is complete as soon
    as a key outside it arrives: folders are yielded while the listing goes on, and memory
    holds only the folders on the current key's path. Keys under ``.cachedoctor/`` (the
    quarantine), ``.git/`` and ``__pycache__/``, lock names and keys an ``exclude`` glob matches
    (relative to the target) are left out unseen."""
    if target.kind == "object":
        for info in target.listing:
            if not excluded(info.url.rsplit("/", 1)[-1], exclude):
                yield Folder(info.url.rsplit("/", 1)[0], [info.url], listed=(info,))
        return
    root = target.location.url
    cut = len(target.location.key) + 1 if target.location.key else 0
    open_folders: dict[str, list[ObjectInfo]] = {}
    for info in target.listing:
        if _left_out(info.key[cut:], exclude):
            continue
        folder = info.url.rsplit("/", 1)[0]
        for done in [f for f in open_folders if f != folder and not folder.startswith(f + "/")]:
            yield _listed(done, open_folders.pop(done))
        open_folders.setdefault(folder if len(folder) >= len(root) else root, []).append(info)
    for done in sorted(open_folders):
        yield _listed(done, open_folders[done])


def _listed(path: str, infos: list[ObjectInfo]) -> Folder:
    return Folder(path, [info.url for info in infos], listed=tuple(infos))


def _left_out(relative: str, exclude: tuple[str, ...]) -> bool:
    """Whether a key (relative to its target) is skipped: under a skipped folder name, a lock
    name, or matching an ``--exclude`` glob itself or through one of its folders."""
    parts = relative.split("/")
    if any(part in _SKIP_DIRS for part in parts[:-1]) or is_lock_name(parts[-1]) or not parts[-1]:
        return True
    return bool(exclude) and any(excluded("/".join(parts[: i + 1]), exclude) for i in range(len(parts)))


_DIR, _FILE, _BROKEN_LINK, _LEFT_ALONE = "folder", "file", "broken link", "left alone"


def _kind(entry: os.DirEntry[str]) -> str:
    """What an entry that is neither a folder nor a file (through symlinks) is: ``_BROKEN_LINK``
    for a dangling symlink, else the name of a special file (``FIFO``, ``socket``...). Raises
    ``OSError`` when it cannot be told."""
    try:
        mode = os.stat(entry.path).st_mode if entry.is_symlink() else entry.stat(follow_symlinks=False).st_mode
    except OSError as exc:
        if entry.is_symlink() and exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return _BROKEN_LINK  # dangling (under another name it is left alone, as it always was)
        raise
    return special_type(mode) or _FILE


def _loop(entry: os.DirEntry[str], exc: OSError) -> str:
    """For a symlink loop: ``_BROKEN_LINK`` under a cache name, ``_LEFT_ALONE`` under another (as
    a dangling link under another name is: no loader opens it, so it fails no gate); re-raises
    ``exc`` for anything else that cannot be stat'ed."""
    if exc.errno == errno.ELOOP and entry.is_symlink():
        return _BROKEN_LINK if claims_cache(entry.name) else _LEFT_ALONE
    raise exc
