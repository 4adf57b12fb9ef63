"""OneTrainer (mgds): ``<cache>/image|text/<group>/variation-<n>/<i>.pt`` plus ``aggregate.pt``.

``<i>`` is the item's *position* in the dataset and ``aggregate.pt`` (a list of
``{crop_resolution, image_path}``, read with the restricted unpickler) is the only record of
which image each position holds. So: every listed position needs its ``<i>.pt``; a listed image
that is gone makes its entry an orphan; an image beside the listed ones that the aggregate does
not list was added after caching (missing). Relative image paths are resolved against the
cache's parent folder, then the current directory.

A recompute writes the raw (unscaled: OneTrainer scales at train time) posterior mean under
``latent_image`` beside ``original_resolution`` and ``crop_offset`` (tuples of ints), in the
peers' key order and dtype, from the image prepared as mgds prepares it (``prepare/mgds.py``:
bilinear antialiased resize, centred crop). A group cached with crop jitter on (OneTrainer's
default) drew each crop offset from mgds' RNG; a peer whose offset is not the centred one shows
it, and then a recompute is refused rather than written with another crop. Text entries hold
tokens and several encoders' states, which only OneTrainer can make again.
"""

from __future__ import annotations

import os
import re
from typing import Any

from cachedoctor.layouts import _recompute
from cachedoctor.layouts._images import is_image, names_in
from cachedoctor.layouts._listing import any_starting
from cachedoctor.layouts.interface import (
    Claim,
    DatasetPlan,
    Expected,
    Layout,
    LayoutError,
    LayoutOptions,
    RecomputeSpec,
    SpecOrWhy,
    Template,
    mtime_ns,
)

_VARIATION = re.compile(r"^variation-(\d+)$")
AGGREGATE = "aggregate.pt"
LATENT_KEY = "latent_image"
TEXT_WHY = "OneTrainer text caches hold tokens and several encoders' states; re-cache them with OneTrainer"


class OneTrainerLayout(Layout):
    name = "onetrainer"
    summary = "OneTrainer/mgds: image|text/<group>/variation-<n>/<i>.pt with aggregate.pt"

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        """A ``variation-<n>`` holding ``aggregate.pt`` (checked, never listed); it claims the
        cache folder above ``image|text/<group>/``."""
        if _VARIATION.match(os.path.basename(folder)) and AGGREGATE in names:
            variation = folder
        else:
            candidates = (
                sorted(n for n in names if n.startswith("variation-") and _VARIATION.match(n))
                if any_starting(names, "variation-")
                else []
            )
            name = next((n for n in candidates if os.path.isfile(os.path.join(folder, n, AGGREGATE))), None)
            if name is None:
                return None
            variation = os.path.join(folder, name)
        cache = os.path.dirname(os.path.dirname(os.path.dirname(variation)))
        return Claim(cache, os.path.join(variation, AGGREGATE), "indexes the cache")

    def opaque(self, name: str) -> bool:
        return _VARIATION.match(name) is not None

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        from cachedoctor.layouts.samplers import from_config as samplers_from_config  # (only with a plan)

        roots = [os.path.abspath(t) for t in targets]
        variations = [v for root in roots for v in _variations(root)]
        if not variations:
            raise LayoutError(
                roots[0] if roots else "--layout onetrainer",
                "no variation-<n>/aggregate.pt below this folder; is it a OneTrainer cache folder?",
            )
        plan = DatasetPlan("onetrainer", roots, entry_suffixes=(".pt",), owned=variations)
        first_of_group: set[str] = set()
        crops: dict[str, list[Any]] = {}  # image group -> its first variation's crop resolutions
        absent_total = 0
        for variation in variations:
            plan.extra.add(os.path.join(variation, AGGREGATE))  # the index, not an entry
            items = _read_aggregate(os.path.join(variation, AGGREGATE), plan)
            if items is None:
                continue
            kind = _kind_of(variation)
            group = os.path.dirname(variation)
            bases = _bases(variation, roots)
            resolved = [_resolve(item.get("image_path"), bases) for item in items]
            listed = sum(1 for p in resolved if p is not None)
            present = sum(1 for p in resolved if p is not None and os.path.exists(p))
            have_dataset = present > 0
            if listed and not have_dataset:
                absent_total += listed
            for i, (item, image) in enumerate(zip(items, resolved, strict=False)):
                _expect_item(plan, variation, i, item, image, kind, have_dataset)
            if kind == "image":
                plan.items += len(items)
                crops.setdefault(group, [item.get("crop_resolution") for item in items])
                if have_dataset and group not in first_of_group:
                    first_of_group.add(group)
                    _expect_unlisted(plan, variation, [p for p in resolved if p is not None])
        sampling, notes = samplers_from_config.onetrainer(roots, crops)
        plan.sampling.extend([sampling] if sampling is not None else [])
        plan.notes.extend(notes)
        if absent_total:
            plan.notes.append(
                f"none of the images that {absent_total} aggregate entries list exist here (a dataset on "
                "another machine?); compared the cache with its own index only"
            )
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        if expected.role == "text":
            return None, TEXT_WHY
        hw = _recompute.latent_hw_of(expected)
        if hw is None:
            return None, _recompute.NO_SIZE
        jittered = _jittered_peer(os.path.dirname(path))
        if jittered is not None:
            return None, (
                f"this group was cached with crop jitter ({jittered}): mgds drew each crop offset "
                "from its RNG, so a recompute would crop elsewhere; re-cache the group with OneTrainer"
            )
        keys = _recompute.keys_of(template)
        return RecomputeSpec(
            "latent",
            expected.source,
            "dict",
            _recompute.format_of(template, path),
            LATENT_KEY,
            _recompute.dtypes_of(template).get(LATENT_KEY, "float32"),
            False,
            hw,
            keys=keys or (LATENT_KEY, "original_resolution", "crop_offset"),
            template=template.path if template else None,
            prepare="mgds",
            posterior="mode",  # SampleVAEDistribution(..., mode='mean') in every model's data loader
        ), None


def _expect_item(
    plan: DatasetPlan, variation: str, i: int, item: dict, image: str | None, kind: str, have_dataset: bool
) -> None:
    if image is None and "image_path" not in item:  # text variations list no paths (empty dicts)
        # The index is the only source a text position has; it exists, so repair asks
        # recompute_spec, which says why it cannot be made here (TEXT_WHY).
        plan.add(Expected(os.path.join(variation, f"{i}.pt"), os.path.join(variation, AGGREGATE), kind))
        return
    source = image or str(item.get("image_path"))
    exists = image is not None and os.path.exists(image)
    hw = _latent_hw(item.get("crop_resolution")) if kind == "image" else None
    if kind == "image":
        source_mtime = mtime_ns(source) if exists else None
    else:  # a text entry is made from the caption beside the image
        caption = os.path.splitext(source)[0] + ".txt"
        source_mtime = mtime_ns(caption)
    plan.add(
        Expected(
            os.path.join(variation, f"{i}.pt"),
            source,
            kind,
            source_mtime,
            latent_hw=hw,
            latent_key=LATENT_KEY if kind == "image" else None,
            source_exists=exists or not have_dataset,
            hints=(("scaling", "raw"),) if kind == "image" else (),  # OneTrainer scales at train time
        )
    )


def _expect_unlisted(plan: DatasetPlan, variation: str, listed: list[str]) -> None:
    """Images in the listed images' folders that the aggregate does not list."""
    known = set(listed)
    aggregate = os.path.join(variation, AGGREGATE)
    for folder in sorted({os.path.dirname(p) for p in listed if os.path.exists(p)}):
        for name in sorted(n for n in names_in(folder) if is_image(n)):
            path = os.path.join(folder, name)
            if path not in known:
                plan.add(Expected(aggregate, path, "latent", mtime_ns(path), in_index=False))


def _read_aggregate(path: str, plan: DatasetPlan) -> list[dict] | None:
    from cachedoctor.formats.interface import ReadError
    from cachedoctor.formats.torch_zip import read_torch_object

    try:
        obj: Any = read_torch_object(path)
    except (OSError, ReadError) as exc:
        plan.notes.append(f"{path}: cannot read the index ({exc}); its folder was compared without it")
        return None
    if not isinstance(obj, list) or not all(isinstance(x, dict) for x in obj):
        plan.notes.append(f"{path}: not a list of item dicts; its folder was compared without it")
        return None
    return obj


def _variations(root: str, limit: int | None = None) -> list[str]:
    """Folders named ``variation-<n>`` holding ``aggregate.pt`` at or below ``root``, sorted."""
    found: list[str] = []
    if not os.path.isdir(root):
        return found
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if _VARIATION.match(os.path.basename(folder)) and AGGREGATE in files:
            found.append(folder)
            dirs[:] = []
            if limit is not None and len(found) >= limit:
                break
    return found


def _kind_of(variation: str) -> str:
    parts = variation.split(os.sep)
    return "text" if len(parts) >= 3 and parts[-3] == "text" else "image"


def _bases(variation: str, roots: list[str]) -> list[str]:
    """Where relative image paths may start: the cache folder's parent, then the cwd."""
    cache = os.path.dirname(os.path.dirname(os.path.dirname(variation)))  # above image|text/<group>/
    return [os.path.dirname(cache), cache, os.getcwd(), *roots]


def _resolve(image_path: Any, bases: list[str]) -> str | None:
    if not isinstance(image_path, str) or not image_path:
        return None
    if os.path.isabs(image_path):
        return image_path
    for base in bases:
        candidate = os.path.normpath(os.path.join(base, image_path))
        if os.path.exists(candidate):
            return candidate
    return os.path.normpath(os.path.join(bases[0], image_path))


#: How many healthy peers of a variation folder are read to tell a centred crop from a jittered one.
PEERS_CHECKED = 16
_jitter_seen: dict[tuple[str, int], str | None] = {}


def _jittered_peer(variation: str) -> str | None:
    """``"<i>.pt: crop_offset (a, b), centred (c, d)"`` for the first of up to ``PEERS_CHECKED``
    readable peers whose recorded offset is not the centred one mgds makes without crop jitter;
    ``None`` when every peer read is centred (a peer whose image fits its bucket exactly tells
    nothing, and unreadable peers are skipped)."""
    from cachedoctor.formats.interface import ReadError
    from cachedoctor.formats.torch_zip import read_torch_object
    from cachedoctor.layouts.prepare.mgds import scale_resolution

    aggregate = os.path.join(variation, AGGREGATE)
    key = (variation, mtime_ns(aggregate) or 0)
    if key in _jitter_seen:
        return _jitter_seen[key]
    found: str | None = None
    try:
        items: Any = read_torch_object(aggregate)
    except (OSError, ReadError):
        items = []
    checked = 0
    for i, item in enumerate(items if isinstance(items, list) else []):
        if checked >= PEERS_CHECKED or i >= 4 * PEERS_CHECKED:  # bounded: a folder of missing peers too
            break
        crop: Any = item.get("crop_resolution") if isinstance(item, dict) else None
        try:
            entry: Any = read_torch_object(os.path.join(variation, f"{i}.pt"))
        except (OSError, ReadError):
            continue
        if not isinstance(entry, dict):
            continue
        original: Any = entry.get("original_resolution")
        offset: Any = entry.get("crop_offset")
        if not (_pair(crop) and _pair(original) and _pair(offset)) or 0 in original:
            continue
        checked += 1
        (ch, cw), (oh, ow) = crop, original
        sh, sw = scale_resolution(oh, ow, ch, cw)
        centred = ((sh - ch) // 2, (sw - cw) // 2)
        if tuple(offset) != centred:
            found = f"{i}.pt: crop_offset {tuple(offset)}, centred {centred}"
            break
    _jitter_seen[key] = found
    return found


def _pair(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(type(x) is int for x in value)


def _latent_hw(crop: Any) -> tuple[int, int] | None:
    if isinstance(crop, (tuple, list)) and len(crop) == 2 and all(isinstance(x, int) for x in crop):
        return crop[0] // 8, crop[1] // 8
    return None
