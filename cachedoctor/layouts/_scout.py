"""The bounded walk of ``--layout auto`` and :meth:`Layout.detect`: which layout shows its sign where.

One walk per target, bounded by ``DETECT_ENTRIES`` directory entries, asks every layout at
each folder for its sign (:meth:`Layout.claim`: a SimpleTuner config, a OneTrainer
``aggregate.pt``, a kohya latent beside its image) and notes the folders holding cache files
that no sign explains. ``auto.py`` cuts the targets into subtrees from what it found.

Why a module of its own, typed by :class:`Signs` rather than by ``Layout``: ``Layout.detect``
runs this walk with the layout alone, so the walk sits below ``interface.py`` and asks only
for the four things it uses; every ``Layout`` has them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from cachedoctor.layouts import _images
from cachedoctor.layouts._listing import Listing, any_ending
from cachedoctor.layouts.model import Claim

#: What a cache file is called (``formats.CACHE_SUFFIXES``, without importing the readers).
_CACHE_SUFFIXES = (".pt", ".pth", ".npz", ".npy", ".safetensors", ".ckpt", ".bin", ".latent")


class Signs(Protocol):
    """What the walk asks of a layout (:class:`~cachedoctor.layouts.interface.Layout` says what each means)."""

    @property
    def name(self) -> str: ...

    def claim(self, folder: str, names: set[str]) -> Claim | None: ...

    def resembles(self, names: set[str]) -> bool: ...

    def opaque(self, name: str) -> bool: ...


L = TypeVar("L", bound=Signs)


@dataclass(slots=True)
class Scouting(Generic[L]):
    """What one target's bounded walk found."""

    target: str
    claims: list[tuple[L, Claim]] = field(default_factory=list)  # outermost, in the order found
    #: folders holding cache files that no claim covers, with the layouts their names resemble
    foreign: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    exhausted: bool = False  # the budget ran out before the walk did


def inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def scout(target: str, layouts: Sequence[L]) -> Scouting[L]:
    """Walk ``target`` (sorted, depth first; symlinked folders followed once; hidden folders and
    folders a layout calls opaque never listed) until ``DETECT_ENTRIES`` entries are listed."""
    found: Scouting[L] = Scouting(target)
    if not os.path.isdir(target):
        return found
    roots: set[str] = set()
    seen: set[tuple[int, int]] = set()
    stack, listed = [target], 0
    while stack:
        folder = stack.pop()
        if any(inside(folder, r) for r in roots):
            continue  # a claimed subtree is its layout's to plan
        if listed >= _images.DETECT_ENTRIES:
            found.exhausted = True
            break
        names = Listing()
        subdirs: list[str] = []
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as it:
                for entry in it:  # names only: a cache folder may hold a million files
                    names.add(entry.name)
                    if _is_dir(entry) and _walked(entry.name, layouts):
                        subdirs.append(entry.path)
        except OSError:
            continue
        listed += len(names)
        claim = next(((lay, c) for lay in layouts if (c := lay.claim(folder, names)) is not None), None)
        if claim is not None:
            layout, sign = claim
            root = sign.root if inside(sign.root, target) else target
            sign = Claim(root, sign.marker, sign.sign)
            found.claims = [c for c in found.claims if not inside(c[1].root, root)] + [(layout, sign)]
            found.foreign = [f for f in found.foreign if not inside(f[0], root)]
            roots = {c[1].root for c in found.claims}
            continue
        if any_ending(names, *_CACHE_SUFFIXES):
            found.foreign.append((folder, frozenset(lay.name for lay in layouts if lay.resembles(names))))
        stack.extend(sorted(subdirs, reverse=True))
    return found


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # follows symlinks; a loop stops at ``seen``
    except OSError:
        return False


def _walked(name: str, layouts: Sequence[Signs]) -> bool:
    """A subfolder the walk goes into: not hidden, not ``__pycache__``, not opaque to a layout."""
    return not (name.startswith(".") or name == "__pycache__" or any(lay.opaque(name) for lay in layouts))


__all__ = ["Scouting", "Signs", "inside", "scout"]
