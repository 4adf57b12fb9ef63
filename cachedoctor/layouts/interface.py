"""How a trainer maps dataset items to cache files.

A :class:`Layout` turns scan targets (and options such as a SimpleTuner config) into a
:class:`DatasetPlan`: the cache folders to walk, and per folder the :class:`Expected` entries,
each naming the dataset item it was made from. The scan then pairs what it finds with what
was expected; ``checks/`` judges each pair (missing, orphan, stale, collision, shape).

Layouts may look at the file system (list folders, read image headers, read a cache's own
index such as OneTrainer's ``aggregate.pt``) but never read tensor data: planning must stay a
small fraction of the scan.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field, replace
from typing import ClassVar

from cachedoctor.errors import PathError


class LayoutError(PathError):
    """The dataset description cannot be used: a missing folder, a config that is not JSON, a
    manifest row without a required column. Reported as one line naming ``path``, exit 2."""


@dataclass(frozen=True, slots=True)
class LayoutOptions:
    """What the user told us about the dataset (all optional)."""

    config: str | None = None  # SimpleTuner multidatabackend.json
    manifest: str | None = None  # cachedoctor / generic manifest (.jsonl or .csv)
    model_family: str | None = None  # SimpleTuner embed suffix, kohya arch suffix
    output_dir: str | None = None  # SimpleTuner {output_dir}


@dataclass(frozen=True, slots=True)
class Expected:
    """One cache file a dataset item should have.

    ``path`` is the absolute cache path and ``source`` the item it is made from (an image, a
    caption file). ``also`` lists further items that map to the same path (a name collision).
    ``latent_hw`` is the latent's expected spatial size and ``latent_key`` the tensor that holds
    it (``""`` for a bare tensor, ``None``: the largest tensor of rank >= 3). ``shape`` is an
    exact expected shape (manifests). ``stale_reason`` is set when the layout already knows
    the entry is out of date (a manifest hash that differs, a recorded image size that
    differs). ``shared`` marks an entry named after its content (SimpleTuner's embed of a
    caption), which any number of items may share without a collision. ``source_exists`` is false when the cache's own index lists an item that is gone;
    ``in_index`` is false for an item the cache's index does not list at all.
    """

    path: str
    source: str
    role: str = "latent"  # "latent" or "text"
    source_mtime_ns: int | None = None
    latent_hw: tuple[int, int] | None = None
    latent_key: str | None = None
    shape: tuple[int, ...] | None = None
    stale_reason: str | None = None
    also: tuple[str, ...] = ()
    source_exists: bool = True
    in_index: bool = True
    image_size: tuple[int, int] | None = None  # (W, H): an entry's recorded original_size must match
    shared: bool = False  # named after content (a caption's hash): many items may rightly share it
    crop: tuple[int, int, int, int] | None = None  # recorded preprocessing: resize (W, H), then crop at (top, left)
    text: str | None = None  # the caption a text entry encodes (repair recomputes from it)


@dataclass(slots=True)
class DatasetPlan:
    """Everything a scan needs to compare a cache with its dataset."""

    layout: str
    roots: list[str]  # folders (or files) to walk
    expected: dict[str, dict[str, list[Expected]]] = field(default_factory=dict)  # folder -> path -> entries
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # datasets not checked (disabled, remote)
    no_orphans: set[str] = field(default_factory=set)  # folders shared with datasets not checked
    extra: set[str] = field(default_factory=set)  # files the trainer writes beyond the items (never orphans)
    owned: list[str] | None = None  # folders whose files the layout accounts for (default: roots)
    items: int = 0  # dataset items (images) seen
    entry_suffixes: tuple[str, ...] = (".pt", ".npz", ".safetensors", ".npy")
    source_suffixes: tuple[str, ...] = ()  # files in walked folders that are dataset items, not cache

    def add(self, entry: Expected, folder_path: str | None = None) -> None:
        """Expect ``entry`` (in ``folder_path``, its folder, when the caller knows it); a second
        item with the same path becomes a collision."""
        folder = self.expected.setdefault(folder_path or os.path.dirname(entry.path), {})
        found = folder.get(entry.path)
        if found is None or not entry.in_index:
            folder.setdefault(entry.path, []).append(entry)
            return
        first = found[0]
        if entry.shared or entry.source == first.source or entry.source in first.also:
            return  # one embed for many images with one caption; or the same item named twice
        found[0] = replace(first, also=first.also + (entry.source,))

    def count(self) -> int:
        """Expected entries still in the plan (all of them before a scan consumes it)."""
        return sum(len(v) for f in self.expected.values() for v in f.values())

    def is_entry_name(self, path: str) -> bool:
        """A file this layout would write (an orphan candidate), not metadata or a source."""
        name = os.path.basename(path)
        return name.endswith(self.entry_suffixes) and path not in self.extra

    def owns(self, folder: str) -> bool:
        """Whether every cache file in ``folder`` should be an expected entry (else: orphan)."""
        if folder in self.no_orphans:
            return False
        for root in self.roots if self.owned is None else self.owned:
            if folder == root or folder.startswith(root.rstrip(os.sep) + os.sep):
                return True
        return False

    def is_source_name(self, path: str) -> bool:
        return path.lower().endswith(self.source_suffixes) if self.source_suffixes else False


class Layout(abc.ABC):
    """One trainer's naming scheme."""

    name: ClassVar[str]
    summary: ClassVar[str]

    @abc.abstractmethod
    def detect(self, targets: list[str], options: LayoutOptions) -> str | None:
        """Why these targets look like this layout (a short reason), or ``None``."""

    @abc.abstractmethod
    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        """The expected entries for ``targets``; :class:`LayoutError` if it cannot be built."""


def mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
