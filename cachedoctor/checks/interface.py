"""One rule per finding kind.

A check sees one file at a time (:meth:`Check.check_file`, run inside scan workers on the
reader's metadata), a group of peer files (:meth:`Check.check_peers`, run once per folder when
every file in it has been read), or, when the scan knows the dataset, one pairing of an
expected entry with the file found for it (:meth:`Check.check_entry`). Each check owns a stable ``kind`` name, a default severity and
the fix that cures it; those three are the public vocabulary documented in the README.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from cachedoctor import keynames
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.records import record

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.formats.interface import FileMeta, ReadError
    from cachedoctor.layouts.interface import DatasetPlan, Expected
    from cachedoctor.layouts.samplers.interface import Buckets

_H = TypeVar("_H", bound=Hashable)


@record
class Inspected:
    """One file as the scan saw it: its reader metadata, or the read error, or neither (a temp
    file, or a symlink that leads nowhere: ``link_target`` is what it points to)."""

    path: str
    size: int
    meta: FileMeta | None = None
    error: ReadError | None = None
    temp: bool = False
    link_target: str | None = None  # a dangling symlink (or a loop, with ``link_loop``): never opened
    link_loop: bool = False


@record
class PeerTensor:
    """One tensor as peer checks compare it. ``key`` is its key's family (``keynames.family``:
    ``latents_64x48`` -> ``latents_HxW``, ``latents_1x8x8_bfloat16`` -> ``latents_FxHxW``), so that
    tensors of one kind are peers whatever size or dtype their keys spell; ``name`` is the key as
    the file holds it, where it differs (what messages name)."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    name: str = ""

    @property
    def label(self) -> str:
        """The key as the file holds it (``<root>`` for a bare tensor)."""
        return self.name or self.key or "<root>"


@record
class PeerEntry:
    """What peer checks need of one file: small, so a folder of a million entries fits.

    ``stats`` (deep reads only) holds each finite latent's per-channel means and standard
    deviations as ``(peer key, 2*C float32 bytes)``: 32 bytes for an SD latent, kept apart from
    ``tensors`` so that files of one structure still share one variant.
    """

    path: str
    tensors: tuple[PeerTensor, ...]
    stats: tuple[tuple[str, bytes], ...] = ()


class PeerGroup:
    """Files of one folder with the same structure (format family, container, key set).

    A folder of a million latents holds a handful of distinct structures (one per bucket
    shape and dtype), so the group is kept as its :attr:`variants`: each distinct tensors
    tuple with the paths that carry it. Peer checks judge each variant once and name its paths,
    instead of walking every file's tensors once per check.
    """

    __slots__ = ("entries", "folder", "variants")

    def __init__(self, folder: str, entries: tuple[PeerEntry, ...]) -> None:
        self.folder = folder
        self.entries = entries
        variants: dict[tuple[PeerTensor, ...], list[str]] = {}
        for entry in entries:
            paths = variants.get(entry.tensors)
            if paths is None:
                variants[entry.tensors] = [entry.path]
            else:
                paths.append(entry.path)
        self.variants = variants

    def majority(self, key: str, value_of: Callable[[PeerTensor], _H | None]) -> tuple[_H | None, int]:
        """The value ``value_of(tensor)`` that more than half of ``key``'s tensors share.

        Returns ``(None, n)`` when there is no strict majority (a tie cannot say who is wrong).
        """
        counts: Counter[_H | None] = Counter()
        for tensors, paths in self.variants.items():
            for t in tensors:
                if t.key == key:
                    counts[value_of(t)] += len(paths)
        total = sum(counts.values())
        if not counts:
            return None, 0
        value, count = counts.most_common(1)[0]
        return (value, total) if count * 2 > total else (None, total)

    def keys(self) -> list[str]:
        return sorted({t.key for tensors in self.variants for t in tensors})


@dataclass(frozen=True, slots=True)
class Found:
    """A cache file as the dataset comparison needs it: when it was written and its tensors.

    ``tensors`` holds ``(key, shape)`` with the keys as saved (``latents_16x12``, not normalised);
    it is empty when the file could not be read or was never read (outside the walked folders).
    ``values`` holds the few tiny numeric arrays readers keep (kohya's ``original_size_<h>x<w>``).
    """

    path: str
    mtime_ns: int
    tensors: tuple[tuple[str, tuple[int, ...]], ...] = ()
    values: tuple[tuple[str, tuple[float, ...]], ...] = ()  # tiny arrays by key (kohya original_size)


@dataclass(slots=True)
class RunView:
    """What the scan knows of the training run once every folder is closed.

    ``dataset`` is the layout's plan (the trainer's configuration, each item's bucket), or
    ``None`` when the scan compared cache files with each other only. ``world_size`` and
    ``batch_size`` are the run's, as the caller gave them or the trainer's configuration holds
    them (``None``: not known, and rules that need them say nothing).
    """

    dataset: DatasetPlan | None = None
    world_size: int | None = None
    batch_size: int | None = None
    #: each dataset's buckets with its world and batch size resolved (flags over the trainer's
    #: config), counted before the scan consumed the plan (``layouts/samplers/census.py``)
    buckets: tuple[Buckets, ...] = ()


class Check(abc.ABC):
    kind: ClassVar[str]
    severity: ClassVar[Severity]
    fix: ClassVar[Fix]
    summary: ClassVar[str]  # one line: what it means (README table, ``explain``)
    why: ClassVar[str] = ""  # ``explain``: why it breaks training (the error the trainer shows, or the silent damage)
    repair: ClassVar[str] = ""  # ``explain``: what ``cachedoctor repair`` does about it, and when it cannot
    deep_only: ClassVar[bool] = False
    found: ClassVar[str] = ""  # ``explain``: how the scan finds it, where the method it implements does not say

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        return ()

    def check_peers(self, group: PeerGroup) -> Iterable[Finding]:
        return ()

    def check_run(self, run: RunView) -> Iterable[Finding]:
        """Judge the training run as a whole, once every folder is closed (how the buckets split
        over the ranks, settings that lose the cache): rules about no single file."""
        return ()

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        """Judge one pairing: ``(e, None)`` nothing found for ``e``, ``(None, f)`` nothing
        expected ``f``, ``(e, f)`` both. Only called when the scan knows the dataset."""
        return ()

    def finding(
        self, path: str, message: str, *, fix: Fix | None = None, source: str | None = None, **details: Any
    ) -> Finding:
        return Finding(
            kind=self.kind,
            severity=self.severity,
            path=path,
            message=message,
            fix=fix or self.fix,
            source=source,
            details=details,
        )


def feature_dim(key: str, shape: tuple[int, ...]) -> int | None:
    """The size that all peers of a key must share: a latent's channels, an embedding's width.

    ``[C,H,W]`` and ``[C,F,H,W]`` latents -> ``C``; ``[1,L,D]`` and ``[L,D]`` embeddings -> ``D``;
    ``[D]`` pooled vectors -> ``D``. Spatial-only tensors (masks named ``..._HxW``) have none. A
    key that spells its size (``latents_1x8x8_bfloat16``, given as the file holds it) over a
    patch-token latent ``[h, w, D]`` -> ``D``.
    """
    rank = len(shape)
    if rank == 0:
        return None
    parsed = keynames.parse(key)
    if rank >= 3:
        if rank == 3 and parsed.dims is not None and tuple(shape[:2]) == parsed.dims[-2:] != tuple(shape[-2:]):
            return shape[-1]
        return shape[-1] if shape[0] == 1 else shape[0]
    if rank == 2 and parsed.family.endswith("HxW"):
        return None
    return shape[-1]


def describe_read_error(error: ReadError) -> dict[str, Any]:
    return {"problem": error.problem, **error.details}
