"""The values a layout hands the scan and repair: what the user said (:class:`LayoutOptions`),
what a plan expects (:class:`DatasetPlan` of :class:`Expected` entries, its :class:`LayoutPart`
lines), a layout's sign in a folder (:class:`Claim`), and how an entry is made again
(:class:`RecomputeSpec`, from a healthy peer: :class:`Template`).

Why a module of its own, below ``interface.py``: the pieces :class:`~cachedoctor.layouts.interface.Layout`
calls for its default behaviour (``_scout.py``: the bounded walk of ``detect``; ``_recompute.py``:
the default specs and template kinds) need these values but not the class, so they import them
from here and ``interface.py`` imports them in turn. Every name is still importable from
``interface.py``, where the layouts take them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cachedoctor.errors import PathError

if TYPE_CHECKING:
    from cachedoctor.formats.interface import FileMeta
    from cachedoctor.layouts._hazards import Hazard
    from cachedoctor.layouts.samplers.interface import Sampling
    from cachedoctor.stores.interface import ObjectInfo
    from cachedoctor.stores.s3 import S3Settings


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
    kohya_config: str | None = None  # sd-scripts dataset config TOML (--dataset_config)
    #: sd-scripts' bucket options from the command line (resolution, enable_bucket, min_bucket_reso,
    #: max_bucket_reso, bucket_reso_steps, bucket_no_upscale), as (name, value) pairs; below the TOML
    kohya_args: tuple[tuple[str, Any], ...] = ()
    #: how a manifest's s3:// rows are reached (``None``: the standard AWS chain decides)
    s3: S3Settings | None = None
    #: a ``--config`` of a trainer with no flag of its own (musubi-tuner, ai-toolkit, diffusion-pipe):
    #: ``(layout name, path)``. ``configs.routed`` puts each ``--config`` where its trainer's layout
    #: reads it: SimpleTuner's in ``config``, sd-scripts' in ``kohya_config``, the others here.
    trainer_config: tuple[str, str] | None = None
    config_sign: str | None = None  # what in the --config file showed its trainer (the layout line says so)


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
    pre_resize: tuple[int, int] | None = None  # (W, H) an earlier resize the trainer applies first (SimpleTuner)
    text: str | None = None  # the caption a text entry encodes (repair recomputes from it)
    frames: int | None = None  # a video latent's frames (``[C, F, H, W]``): musubi-tuner's window, VAE-compressed
    items: tuple[int, ...] = ()  # of a file of several items (a diffusion-pipe shard): those stale_reason is about
    #: what the layout's recompute_spec needs beyond these (kohya: resize, flip); an s3:// source's
    #: listed ``etag`` and ``size``, which ``manifest build`` records (SimpleTuner aws)
    hints: tuple[tuple[str, Any], ...] = ()


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
    parts: list[LayoutPart] = field(default_factory=list)  # which layout each part of the targets got, and why
    sampling: list[Sampling] = field(default_factory=list)  # how the trainer samples each dataset (rank-imbalance)
    hazards: list[Hazard] = field(default_factory=list)  # trainer settings known to lose the cache (config-hazard)
    #: s3:// roots -> how to reach them, from the dataset's own config (its endpoint and keys): the
    #: scan lists a cache prefix with the settings the trainer writes it with, not the defaults
    remote_settings: dict[str, S3Settings] = field(default_factory=dict)
    #: s3:// source URL -> its object as the dataset's listing saw it (a remote recompute GETs that version)
    remote_sources: dict[str, ObjectInfo] = field(default_factory=dict)

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

    def by_path(self, paths: set[str] | None = None) -> dict[str, list[Expected]]:
        """Cache path -> its expected entries (only ``paths``, when given): what repair plans
        from. A copy, taken before a scan consumes the plan."""
        return {
            p: list(e) for folder in self.expected.values() for p, e in folder.items() if paths is None or p in paths
        }

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

    def layout_for(self, path: str) -> str | None:
        """The layout that planned the entry at ``path`` (a plan of mixed subtrees: its part's)."""
        return self.layout


@dataclass(frozen=True, slots=True)
class LayoutPart:
    """One part of the targets and the layout it got: ``root`` is the folder (``None``: the
    dataset description named the folders), ``line`` the layout line the report prints for it."""

    layout: str  # a layout name, or "none": cache files compared with each other only
    root: str | None
    line: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A layout's sign in one folder (``--layout auto``): ``marker`` is the file that shows it,
    ``sign`` what it shows, ``root`` the folder the layout's plan is given for it."""

    root: str
    marker: str
    sign: str  # "sits next to its image", "indexes the cache", "describes the datasets"

    @property
    def reason(self) -> str:
        return f"{self.marker} {self.sign}"


@dataclass(frozen=True, slots=True)
class RecomputeSpec:
    """How to make one entry again, in the layout's own format.

    ``latent_hw`` is the latent's spatial size the layout expects (the image is resized and
    cropped to ``latent_hw * downscale`` pixels) by the preparer ``prepare`` names, one per
    trainer (``layouts/prepare/``). ``resize`` (W, H) and ``crop`` (top, left) are the trainer's
    recorded preprocessing where it keeps one (SimpleTuner's ``intermediary_size`` and
    ``crop_coordinates``). ``writer`` names the file layout to produce. ``metadata`` is the
    safetensors ``__metadata__`` the trainer writes for this very entry (musubi-tuner's
    ``architecture``/``width``/``height``, ai-toolkit's settings), and ``scaling`` the
    ``(factor, shift)`` the trainer applies as ``(latent - shift) * factor`` when the layout knows
    it (``None`` with ``scaled``: the encoder's own factors); ``posterior`` whether the trainer
    caches the posterior's mode or a sample (``repair --posterior trainer`` follows it).
    Plain values only: it is journaled as JSON and carried to repair's workers.
    """

    role: str  # "latent" or "text"
    source: str
    writer: str  # "bare-tensor", "kohya-npz", "onetrainer-dict", "dict"
    container_format: str = "torch-zip"  # torch-zip, torch-gzip, torch-legacy, npz, safetensors
    key: str = ""  # the tensor that holds the latent ("" for a bare tensor)
    dtype: str = "float32"
    scaled: bool = False  # SimpleTuner caches (latent - shift) * factor; kohya and OneTrainer raw latents
    latent_hw: tuple[int, int] | None = None
    resize: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    pre_resize: tuple[int, int] | None = None  # (W, H): a resize the trainer applies before ``resize``
    text: str | None = None  # the caption, for text entries
    keys: tuple[str, ...] = ()  # every key the healthy peers hold (the file must hold the same)
    flipped: bool = False  # kohya: also latents_flipped_<h>x<w>
    template: str | None = None  # a healthy peer whose container, keys and dtypes the new file copies
    prepare: str = "cover"  # the trainer's image preparation (``layouts/prepare/``): resize, crop, records
    peers: tuple[str, ...] = ()  # healthy neighbours the written file is checked against, as the scan would
    interpolation: str | None = None  # kohya: the dataset's resize_interpolation (None: sd-scripts' default)
    metadata: tuple[tuple[str, str], ...] = ()  # safetensors __metadata__ the trainer writes for this entry
    scaling: tuple[float, float] | None = None  # (factor, shift) the trainer applies, when the layout knows them
    posterior: str = ""  # what the trainer caches: "mode" (the mean), "sample" (a draw), "" (the layout does not say)

    def cost(self) -> int:
        """Work units for balancing workers: pixels for images, characters for captions."""
        if self.role == "text":
            return 1000 + len(self.text or "")
        h, w = self.latent_hw or (64, 64)
        return h * w * 64 * (2 if self.flipped else 1)

    def batch_key(self) -> tuple[Any, ...]:
        """Items with equal keys can be stacked into one encoder batch."""
        return (self.role, self.latent_hw)


@dataclass(frozen=True, slots=True)
class Template:
    """A healthy peer of a broken entry (same folder and kind: ``Layout.template_kind``): the
    file whose format, container, keys and dtypes a recomputed entry copies. ``meta`` is its
    quick read; ``metadata`` the safetensors metadata of each healthy peer (the template first)."""

    path: str
    meta: FileMeta
    peers: tuple[str, ...] = ()  # healthy files of the same folder and kind (the template first)
    metadata: tuple[tuple[tuple[str, str], ...], ...] = ()


#: A recompute spec, or why the entry cannot be recomputed here (exactly one is set).
SpecOrWhy = tuple["RecomputeSpec | None", "str | None"]


__all__ = [
    "Claim",
    "DatasetPlan",
    "Expected",
    "LayoutError",
    "LayoutOptions",
    "LayoutPart",
    "RecomputeSpec",
    "SpecOrWhy",
    "Template",
]
