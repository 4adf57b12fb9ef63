"""Find the quarantines below the scan's targets: ``quarantine list|restore|purge PATH...``.

A repair keeps its quarantine in ``<cache root>/.cachedoctor/quarantine/``, and its cache root
is whatever the scan was given (a cache folder, a file's folder, a kohya image folder, each
folder a SimpleTuner config names). So the quarantine commands take the same targets and look
at and below each for ``.cachedoctor/quarantine/``: one walk that keeps only the folders still
to visit (flat memory, however many files a cache folder holds), never enters cachedoctor's own
folder beyond that index, and skips hidden folders (``.git``, ``.venv``, caches of other tools)
and ``__pycache__``: a hidden cache root is found when it is named. Symlinked folders are
followed once, as the scan follows them.

An object-store prefix (``s3://bucket/prefix``) is one cache root, named on its own: a
:class:`Prefix` answers as a :class:`Search` does, so the commands are written once.

Light on purpose: ``quarantine list`` imports no scan, layout or reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cachedoctor.errors import PathError
from cachedoctor.repair.quarantine import QuarantineRun
from cachedoctor.repair.quarantine_runs import find_run, list_runs
from cachedoctor.repair.run_ids import resolve_run
from cachedoctor.statedir import STATE_DIR, quarantine_root
from cachedoctor.stores.interface import Store

MISSING = "no such file or folder; check the path (and that its disk is mounted)"
#: Where a SimpleTuner checkout keeps the config naming its cache folders (``layouts/simpletuner.py``'s
#: ``CONFIG_NAMES``, a test holds them equal): named here so that ``list`` imports no layout.
SIMPLETUNER_CONFIGS = ("multidatabackend.json", os.path.join("config", "multidatabackend.json"))
_SKIPPED = frozenset({"__pycache__", "node_modules"})


@dataclass(slots=True)
class Search:
    """Where to look: folders searched at and below (``below``), and folders looked at alone
    (``here``: the folders of files named on their own)."""

    below: list[str] = field(default_factory=list)
    here: list[str] = field(default_factory=list)
    given: set[str] = field(default_factory=set)  # the folders of the paths given
    named: set[str] = field(default_factory=set)  # and the cache folders a dataset description names
    store: Store | None = None  # the local disk's (``connect.local_store``)

    @classmethod
    def of(cls, targets: Sequence[str], described: Sequence[str] = ()) -> Search:
        """``targets`` must exist (a missing one is a :class:`PathError`); ``described`` are the
        cache folders a dataset description names, searched when they exist."""
        search = cls()
        for target in targets:
            path = os.path.abspath(target)
            if os.path.isdir(path):
                search.below.append(path)
            elif os.path.exists(path):
                search.here.append(os.path.dirname(path))
            else:
                raise PathError(path, MISSING)
        search.given = {os.path.normpath(p) for p in search.below + search.here}
        search.below += [os.path.abspath(d) for d in described if os.path.isdir(d)]
        search.named = {os.path.normpath(p) for p in search.below + search.here}
        return search

    def roots(self) -> list[str]:
        """Every cache root holding a quarantine, sorted, each once (a root reached twice, through
        a symlink or as a target inside another, is listed under the first path found)."""
        seen: set[tuple[int, int]] = set()
        found: dict[str, None] = {}
        tops: list[str] = []
        for top in sorted({os.path.normpath(b) for b in self.below}):  # a target inside another: walked once
            if not any(top.startswith(t.rstrip(os.sep) + os.sep) for t in tops):
                tops.append(top)
        for root in [*(h for h in self.here if _holds_quarantine(h)), *_below(tops)]:
            key = _identity(root)
            if key is not None and key not in seen:
                seen.add(key)
                found[root] = None
        return sorted(found)

    def runs(self) -> list[tuple[str, list[QuarantineRun]]]:
        return [(root, runs) for root in self.roots() if (runs := list_runs(root))]

    def resolve(self, given: str, where: str) -> str:
        """The run id that ``given`` names here or below: itself, ``latest`` or a unique prefix
        (``run_ids.py``, as the s3:// commands resolve it); :class:`PathError` on ``where``."""
        ids = {name for root in self.roots() for name in _run_folders(root)}
        return resolve_run(given, ids, where)

    def find(self, run_id: str, verb: str = "restore") -> list[tuple[str, QuarantineRun]]:
        """``(root, run)`` for each root holding ``run_id``: one repair of several cache roots
        is one run id in each of them. The same run copied along with its cache is another
        matter: :class:`AmbiguousRun`, unless the user named each of those roots."""
        found = [(root, run) for root in self.roots() if (run := find_run(root, run_id)) is not None]
        if len(found) > 1 and any(run.moved for _, run in found) and not all(r in self.named for r, _ in found):
            raise AmbiguousRun(
                run_id,
                f"is in {len(found)} cache roots, and some were copied or moved from elsewhere: "
                f"{', '.join(r for r, _ in found)}; name the one you mean: `cachedoctor quarantine {verb} {run_id} ROOT`",
            )
        return found


@dataclass(slots=True)
class Prefix:
    """One object-store prefix as the place to look: the cache root itself (what ``Search``
    finds by walking, a prefix names). Its runs are listed once."""

    url: str
    store: Store
    _runs: list[QuarantineRun] | None = None

    @property
    def below(self) -> list[str]:
        return [self.url]

    @property
    def here(self) -> list[str]:
        return []

    @property
    def given(self) -> set[str]:
        return {self.url}

    def roots(self) -> list[str]:
        return [self.url]

    def _listed(self) -> list[QuarantineRun]:
        if self._runs is None:
            self._runs = list_runs(self.url, self.store)
        return self._runs

    def runs(self) -> list[tuple[str, list[QuarantineRun]]]:
        return [(self.url, runs)] if (runs := self._listed()) else []

    def resolve(self, given: str, where: str) -> str:
        return resolve_run(given, (r.run_id for r in self._listed()), where)

    def find(self, run_id: str, verb: str = "restore") -> list[tuple[str, QuarantineRun]]:
        return [(self.url, run) for run in self._listed() if run.run_id == run_id]


class AmbiguousRun(PathError):
    """One run id in several cache roots that are not one repair's (a cache copied with its
    quarantine): which one to restore or purge is the user's to say."""


def _run_folders(root: str) -> list[str]:
    """The run ids of a root's quarantine (its folders' names; nothing read inside them)."""
    base = quarantine_root(root)
    try:
        return [e.name for e in os.scandir(base) if e.is_dir()]
    except OSError:
        return []


def _holds_quarantine(folder: str) -> bool:
    return os.path.isdir(quarantine_root(folder))


def _identity(folder: str) -> tuple[int, int] | None:
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _below(tops: list[str]) -> Iterator[str]:
    """The folders at or below ``tops`` that hold a quarantine, depth first in name order."""
    followed = {key for top in tops if (key := _identity(top)) is not None}  # and those entered through a symlink
    for top in tops:
        stack = [top]
        while stack:
            folder = stack.pop()
            subdirs: list[str] = []
            try:
                with os.scandir(folder) as it:
                    for entry in it:  # not listed whole: a cache folder may hold a million files
                        if entry.name == STATE_DIR:
                            if _holds_quarantine(folder):
                                yield folder
                        elif not entry.name.startswith(".") and entry.name not in _SKIPPED and _is_dir(entry, followed):
                            subdirs.append(entry.path)
            except OSError:
                continue  # unreadable: nothing of ours can be in it
            stack.extend(sorted(subdirs, reverse=True))


def _is_dir(entry: os.DirEntry, followed: set[tuple[int, int]]) -> bool:
    try:
        if not entry.is_dir():
            return False
        if not entry.is_symlink():
            return True
        st = os.stat(entry.path)
    except OSError:
        return False
    key = (st.st_dev, st.st_ino)
    if key in followed:
        return False
    followed.add(key)
    return True


__all__ = ["MISSING", "SIMPLETUNER_CONFIGS", "AmbiguousRun", "Prefix", "Search"]
