"""kohya-ss sd-scripts: caches live next to each image.

Latents are ``<stem>_<W:04d>x<H:04d>_<arch>.npz`` where ``W x H`` is the image's own size (so a
resized image needs a new file), or ``<stem>.npz`` from older versions. Text-encoder outputs
are ``<stem>_te_outputs.npz`` (SDXL) or ``<stem>_<arch>_te.npz``; when a folder holds any, every
image in it needs one. ``latents_<h>x<w>`` keys are checked against their shapes by
``shape-mismatch`` without the dataset; here the dataset adds missing, orphan, stale and
collision findings. Each entry's recorded ``original_size`` must equal the image's size from its
header (which only an old-style name can get wrong: a new-style name carries the size). When a
``<stem>.npz`` exists, sd-scripts uses it whatever else is there, and so does this layout.

A recompute writes raw float32 latents in an npz whose keys carry the bucket
(``latents_<h>x<w>``, plus ``original_size``/``crop_ltrb`` with the same suffix, and the flipped
latent when the peers have one). The bucket is recorded only inside the entry itself.
"""

from __future__ import annotations

import os
import re
from collections import Counter

from cachedoctor.layouts import _recompute
from cachedoctor.layouts._images import DETECT_ENTRIES, SOURCE_SUFFIXES, image_size, stem, walk_images
from cachedoctor.layouts.interface import (
    DatasetPlan,
    Expected,
    Layout,
    LayoutError,
    LayoutOptions,
    RecomputeSpec,
    SpecOrWhy,
    Template,
)

_LATENT_NAME = re.compile(r"^(?P<stem>.+)_(?P<w>\d{4,})x(?P<h>\d{4,})_(?P<arch>[a-z0-9]+)\.npz$")
_TE_NAME = re.compile(r"^(?P<stem>.+?)(?P<suffix>_te_outputs|_[a-z0-9]+_te)\.npz$")
_BUCKET_KEY = re.compile(r"^latents_(\d+)x(\d+)$")
_CAPTION_SUFFIXES = (".txt", ".caption")
_DETECT_FOLDERS = 200


class KohyaLayout(Layout):
    name = "kohya"
    summary = "kohya-ss sd-scripts: <stem>_<W>x<H>_<arch>.npz and <stem>_te_outputs.npz next to each image"

    def detect(self, targets: list[str], options: LayoutOptions) -> str | None:
        for target in targets:
            if not os.path.isdir(target):
                continue
            for n, (folder, images, names) in enumerate(walk_images(target, DETECT_ENTRIES)):
                if n >= _DETECT_FOLDERS:
                    break
                stems = {stem(e.name) for e in images}
                if not stems:
                    continue
                for name in sorted(names):  # the first match by name, not by directory order: same line on every copy
                    m = _LATENT_NAME.match(name) or _TE_NAME.match(name)
                    if m is not None and m.group("stem") in stems:
                        return f"{os.path.join(folder, name)} sits next to its image"
        return None

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        folders = [os.path.abspath(t) for t in targets]
        for folder in folders:
            if not os.path.isdir(folder):
                raise LayoutError(
                    folder, "no such image folder; kohya caches live next to the images, so scan the image folder"
                )
        plan = DatasetPlan("kohya", folders, entry_suffixes=(".npz",), source_suffixes=SOURCE_SUFFIXES)
        arch = options.model_family or _detect_arch(folders)
        if arch is None:
            plan.notes.append(
                "no <stem>_<W>x<H>_<arch>.npz latents found; expecting '_sdxl' (pass --model-family to say)"
            )
            arch = "sdxl"
        unreadable = 0
        for root in folders:
            for folder, images, names in walk_images(root):
                te_suffix = _te_suffix(names, arch)
                for image in images:
                    size = image_size(image.path)
                    if size is None:
                        unreadable += 1
                        continue
                    plan.items += 1
                    _expect_image(plan, folder, image, size, names, arch, te_suffix)
        if unreadable:
            plan.notes.append(f"{unreadable} image(s) could not be opened and were not compared")
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        if expected.role == "text":
            return _recompute.text_spec(expected, template, path)
        own = _recompute.own_meta(path)
        key = (
            next((t.key for t in own.tensors if _BUCKET_KEY.match(t.key) or t.key == "latents"), None) if own else None
        )
        if own is None or key is None:
            return None, (
                "kohya records an entry's bucket only inside the entry; with the file unreadable or missing, "
                "let sd-scripts re-cache it, or pass a manifest with latent_hw"
            )
        match = _BUCKET_KEY.match(key)
        shape = next(t.shape for t in own.tensors if t.key == key)
        if match is None and len(shape) < 2:
            return None, f"its '{key}' has shape {list(shape)}, which names no latent size; let sd-scripts re-cache it"
        hw = (int(match.group(1)), int(match.group(2))) if match else (shape[-2], shape[-1])
        keys = _recompute.keys_of(template)
        return RecomputeSpec(
            "latent",
            expected.source,
            "kohya-npz",
            "npz",
            key,
            "float32",
            False,
            hw,
            keys=keys or (key, "original_size" + key[7:], "crop_ltrb" + key[7:]),
            flipped=any(k.startswith("latents_flipped") for k in keys),
            template=template.path if template else None,
            prepare="kohya",
        ), None


def _expect_image(
    plan: DatasetPlan,
    folder: str,
    image: os.DirEntry,
    size: tuple[int, int],
    names: set[str],
    arch: str,
    te_suffix: str | None,
) -> None:
    w, h = size
    name_stem = stem(image.name)
    mtime = image.stat().st_mtime_ns
    current = f"{name_stem}_{w:04d}x{h:04d}_{arch}.npz"
    legacy = f"{name_stem}.npz"
    # sd-scripts uses an old-style <stem>.npz whenever one exists
    path = os.path.join(folder, legacy if legacy in names else current)
    plan.add(Expected(path, image.path, "latent", mtime, image_size=size))
    if te_suffix is not None:
        caption = next((os.path.join(folder, name_stem + s) for s in _CAPTION_SUFFIXES if name_stem + s in names), None)
        caption_mtime = os.stat(caption).st_mtime_ns if caption else None
        plan.add(Expected(os.path.join(folder, name_stem + te_suffix), caption or image.path, "text", caption_mtime))


def _te_suffix(names: set[str], arch: str) -> str | None:
    """The text-encoder output naming this folder uses, if it has any."""
    counts: Counter = Counter(m.group("suffix") for n in names if (m := _TE_NAME.match(n)) is not None)
    if not counts:
        return None
    return counts.most_common(1)[0][0] + ".npz"


def _detect_arch(folders: list[str]) -> str | None:
    counts: Counter = Counter()
    for root in folders:
        for n, (_, _, names) in enumerate(walk_images(root)):
            if n >= _DETECT_FOLDERS:
                break
            counts.update(m.group("arch") for name in names if (m := _LATENT_NAME.match(name)) is not None)
    return counts.most_common(1)[0][0] if counts else None
