"""SimpleTuner's bucket metadata (``aspect_ratio_bucket_metadata_<id>.json``): each image's
latent size and the preprocessing its VAE caching recorded (resize, crop, the squash step).

Keys are absolute paths of the machine that built the cache; they are matched by the path below
``instance_data_dir``, so a cache built on a rented GPU box is checked locally.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import DatasetPlan

Bucket = tuple[tuple[int, int], "tuple[int, int, int, int] | None", "tuple[int, int] | None"]


def bucket_sizes(path: str, data: str, plan: DatasetPlan) -> dict[str, Bucket]:
    """Image path relative to the dataset -> expected latent ``(h, w)`` and the recorded
    preprocessing ``(resize W, resize H, crop top, crop left)``, from bucket metadata.

    Keys are absolute paths of the machine that built the cache; they are matched by the path
    below ``instance_data_dir``, so a cache built on a rented GPU box is checked locally.
    """
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            metadata = json.load(handle)
    except (OSError, ValueError, RecursionError) as exc:
        plan.notes.append(f"{path}: unreadable bucket metadata ({exc}); latent sizes were not compared")
        return {}
    return sizes_from_metadata(metadata, data)


def sizes_from_metadata(metadata: Any, data: str) -> dict[str, Bucket]:
    """:func:`bucket_sizes` of metadata already read (an ``aws`` dataset's, from its bucket).
    ``data`` is the dataset's root; ``""`` (a whole bucket) matches every key as it is."""
    if not isinstance(metadata, dict):
        return {}
    root = data.rstrip(os.sep) + os.sep if data else ""
    sizes: dict[str, Bucket] = {}
    unmatched: list[tuple[list[str], Bucket]] = []
    squashed = _squashed(metadata)
    for key, value in metadata.items():
        target = value.get("target_size") if isinstance(value, dict) else None
        if not (isinstance(target, list) and len(target) == 2 and all(isinstance(x, int) for x in target)):
            continue
        hw = ((target[1] // 8, target[0] // 8), _crop(value), (target[0], target[1]) if key in squashed else None)
        if key.startswith(root):
            sizes[key[len(root) :]] = hw
        else:
            unmatched.append((key.replace("\\", "/").split("/"), hw))
    if unmatched:
        sizes.update(_match_by_suffix(unmatched, data))
    return sizes


def _squashed(metadata: dict) -> set[str]:
    """Images SimpleTuner's VAE caching first resizes straight to ``target_size``
    (``BatchedTrainingSamples.process_aspect_grouped_images``): those of an aspect bucket in which
    two or more images are not already at ``target_size``. (It groups per processing batch of
    ``process_queue_size`` images, 16 by default; a bucket larger than that can leave one image
    alone in a batch, which then skips this step: not modelled.)"""
    needing: dict[Any, list[str]] = {}
    for key, value in metadata.items():
        if not isinstance(value, dict):
            continue
        target, original = value.get("target_size"), value.get("original_size")
        if isinstance(target, list) and isinstance(original, list) and list(original) != list(target):
            ratio = value.get("aspect_ratio")
            needing.setdefault(ratio if isinstance(ratio, (int, float, str)) else repr(ratio), []).append(key)
    return {key for keys in needing.values() if len(keys) > 1 for key in keys}


def _crop(value: dict) -> tuple[int, int, int, int] | None:
    """SimpleTuner resizes to ``intermediary_size`` [W, H], then crops at ``crop_coordinates``
    (top, left) to ``target_size``."""
    size, at = value.get("intermediary_size"), value.get("crop_coordinates")
    if not (isinstance(size, list) and len(size) == 2 and isinstance(at, list) and len(at) == 2):
        return None
    try:
        return (int(size[0]), int(size[1]), int(at[0]), int(at[1]))
    except (TypeError, ValueError):
        return None


def _match_by_suffix(keys: list[tuple[list[str], Bucket]], data: str) -> dict[str, Bucket]:
    """Find the prefix the foreign keys share with the dataset: where the dataset's own folder
    name appears in them (``.../datasets/photos/a/b.png`` -> ``a/b.png``)."""
    name = os.path.basename(data.rstrip(os.sep))
    out: dict[str, Bucket] = {}
    for parts, hw in keys:
        if name in parts[:-1]:
            at = len(parts) - 1 - parts[:-1][::-1].index(name)
            out[os.path.join(*parts[at:])] = hw
        else:
            out[parts[-1]] = hw
    return out
