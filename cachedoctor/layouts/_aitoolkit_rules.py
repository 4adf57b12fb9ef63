"""ostris/ai-toolkit's cache names, buckets and captions, re-implemented from its code (commit 27a03a9).

ai-toolkit names each cache file ``<stem>_<hash>.safetensors`` where the hash digests the settings
that made it, so a changed setting gives a new name and leaves the old file behind; to audit a
folder we must rebuild those settings exactly. File:line references are to ai-toolkit 27a03a9:

* Latents: ``<image dir>/_latent_cache/`` (``toolkit/dataloader_mixins.py:1827-1842``), info dict
  ``get_latent_info_dict`` (l.1779-1825): filename, scale_to_width/height, crop_x/y/width/height,
  latent_space_version, latent_version (1), then ``flip_x``/``flip_y`` (only when set) and the
  video/audio keys. Written by ``_cache_one_latent`` (l.2076-2080) with ``save_file(state_dict,
  path, metadata=get_meta_for_safetensors(info))``; key ``latent`` (+ ``first_frame_latent``,
  ``audio_latent``, ``num_frames``, ``tensor``, ``waveform``... for video/audio).
* Text embeddings: ``<image dir>/_t_e_cache/`` (l.2153-2163), info dict
  ``get_text_embedding_info_dict`` (l.2120-2151): caption, text_embedding_space_version (the arch),
  text_embedding_version (1), + control keys. Written by ``PromptEmbeds.save``
  (``toolkit/prompt_utils.py:122-145``): ``text_embed`` or ``text_embed_<i>``, ``pooled_embed``,
  ``attention_mask[_<i>]``, and *no* metadata.
* The hash (l.1837-1840): urlsafe base64 of ``md5(json.dumps(info, sort_keys=True))``, ``=`` removed
  (22 characters).
* Metadata (``toolkit/metadata.py:13-28``): every non-str value json-dumped, then ``software``
  (json of name/repo/version, ``version.py``: 0.12.26) and ``format: "pt"``. safetensors stores the
  metadata in hash-map order, so the header's bytes differ from run to run; the values do not.
* Buckets: ``BucketsMixin.setup_buckets`` (l.216-314) with ``toolkit/buckets.py:17-48``; with
  ``buckets: false`` the info keeps the FileItemDTO defaults (``data_transfer_object/
  data_loader.py:172-183``) and the image is centre-cropped and resized to ``resolution``
  (dataloader_mixins.py:941-964), so the name does not depend on the resolution.
* Captions: ``_aitoolkit_captions`` (re-exported here).

The job YAML and the model families (``FAMILIES``) are read in ``_aitoolkit_config`` (re-exported
here). No torch, numpy or PIL at import time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachedoctor.layouts._aitoolkit_captions import (
    cache_caption,
    dop_caption,
    dropout_caption,
    inject_trigger,
    raw_caption,
)
from cachedoctor.layouts.interface import LayoutError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cachedoctor.layouts._aitoolkit_config import AiToolkitDataset


def __getattr__(name: str) -> Any:
    """The job config's and the families' names, re-exported on first use: a scan that meets no
    ai-toolkit cache never imports them (its start-up stays light)."""
    if name in ("FAMILIES", "Family"):
        from cachedoctor.layouts import _aitoolkit_families

        return getattr(_aitoolkit_families, name)
    if name in ("AiToolkitDataset", "load_job_config"):
        from cachedoctor.layouts import _aitoolkit_config

        return getattr(_aitoolkit_config, name)
    raise AttributeError(name)


__all__ = [
    "cache_caption",
    "dop_caption",
    "dropout_caption",
    "inject_trigger",
    "raw_caption",
]

LATENT_DIR = "_latent_cache"
TEXT_DIR = "_t_e_cache"
#: IP-adapter datasets' ``cache_clip_vision_to_disk`` (l.1323-1350): same scheme beside the clip images,
#: info ``image_encoder_path``, ``filename``, ``is_quad`` (+ flips); not modelled here
CLIP_VISION_DIR = "_clip_vision_cache"
SIZE_DB = ".aitk_size.json"  # {"/<path below the dataset folder>": [w, h, "size:mtime"], "__version__": "0.1.2"}
LATENT_VERSION = 1  # dataloader_mixins.py:1777 (latent_version)
TEXT_EMBEDDING_VERSION = 1  # dataloader_mixins.py:2118 (text_embedding_version)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")  # data_loader.py:39, matched lower-cased
SOFTWARE = {"name": "ai-toolkit", "repo": "https://github.com/ostris/ai-toolkit", "version": "0.12.26"}
HASH_LENGTH = 22
#: keys whose metadata value is the string itself (not json-dumped) in ai-toolkit's own files
_STRING_KEYS = frozenset({"filename", "latent_space_version", "caption", "text_embedding_space_version"})
_LATENT_ORDER = (
    "filename",
    "scale_to_width",
    "scale_to_height",
    "crop_x",
    "crop_y",
    "crop_width",
    "crop_height",
    "latent_space_version",
    "latent_version",
)


@dataclass(frozen=True)
class Placement:
    """Where one image goes at one resolution: the values ai-toolkit puts in the latent's info dict,
    and the pixels it encodes. ``crop_x``/``crop_y`` are None under ``random_crop`` (drawn at start-up)."""

    resolution: int
    scale_to_width: int
    scale_to_height: int
    crop_x: int | None
    crop_y: int | None
    crop_width: int
    crop_height: int
    mode: str  # "bucket", "square" (square_crop) or "center" (buckets off: centre crop, resize to resolution)

    @property
    def out_size(self) -> tuple[int, int]:
        """``(W, H)`` of the pixels ``encode_images`` receives."""
        if self.mode == "center":
            return self.resolution, self.resolution
        return self.crop_width, self.crop_height

    def latent_hw(self, downscale: int = 8) -> tuple[int, int]:
        """The latent's ``(h, w)``: ``encode_images`` floors a size that is no multiple of the
        downscale (stable_diffusion_model.py:2555-2561)."""
        w, h = self.out_size
        return h // downscale, w // downscale


def bucket_for_image_size(width: int, height: int, resolution: int, divisibility: int) -> tuple[int, int]:
    """``(W, H)`` of the bucket, as ``get_bucket_for_image_size`` (toolkit/buckets.py:17-48): never
    more pixels than the image or ``resolution**2``; the floor/ceil multiple pair closest in area."""
    total, max_pixels = width * height, resolution * resolution
    target = min(total, max_pixels)
    scaler = (target / total) ** 0.5
    w_raw, h_raw = (width * scaler) / divisibility, (height * scaler) / divisibility
    candidates = [
        (math.floor(w_raw) * divisibility, math.floor(h_raw) * divisibility),
        (math.floor(w_raw) * divisibility, math.ceil(h_raw) * divisibility),
        (math.ceil(w_raw) * divisibility, math.floor(h_raw) * divisibility),
        (math.ceil(w_raw) * divisibility, math.ceil(h_raw) * divisibility),
    ]
    capped = [(w, h) for w, h in candidates if w > 0 and h > 0 and w * h <= max_pixels]
    if not capped:
        capped = [
            (max(divisibility, math.floor(w_raw) * divisibility), max(divisibility, math.floor(h_raw) * divisibility))
        ]
    return min(capped, key=lambda wh: abs(wh[0] * wh[1] - target))


def placement(
    image_size: tuple[int, int],
    resolution: int,
    divisibility: int | None,
    *,
    scale: float = 1.0,
    buckets: bool = True,
    square_crop: bool = False,
    random_crop: bool = False,
) -> Placement:
    """One image's placement at one resolution (``image_size``: ``(W, H)`` after EXIF rotation)."""
    if not buckets:  # FileItemDTO defaults: nothing about the resolution
        w, h = int(image_size[0] * scale), int(image_size[1] * scale)
        return Placement(resolution, w, h, 0, 0, w, h, "center")
    width, height = int(image_size[0] * scale), int(image_size[1] * scale)
    if square_crop:
        factor = max(resolution / width, resolution / height)
        sw, sh = math.ceil(width * factor), math.ceil(height * factor)
        if width > height:
            return Placement(resolution, sw, sh, int(sw / 2 - resolution / 2), 0, resolution, resolution, "square")
        return Placement(resolution, sw, sh, 0, int(sh / 2 - resolution / 2), resolution, resolution, "square")
    if divisibility is None:
        raise ValueError("the bucket divisibility is unknown")
    bw, bh = bucket_for_image_size(width, height, resolution, divisibility)
    factor = max(bw / width, bh / height)
    sw, sh = math.ceil(width * factor), math.ceil(height * factor)
    if random_crop:
        return Placement(resolution, sw, sh, None, None, bw, bh, "bucket")
    return Placement(resolution, sw, sh, int((sw - bw) / 2), int((sh - bh) / 2), bw, bh, "bucket")


def buckets(image_size: tuple[int, int], dataset: AiToolkitDataset) -> list[Placement]:
    """The image's placement for each of the dataset's resolutions (ai-toolkit caches each; two
    resolutions can give the same placement, hence the same file)."""
    divisibility = dataset.model.bucket_divisibility
    if dataset.buckets and not dataset.square_crop and divisibility is None:
        raise LayoutError(
            dataset.config_path,
            f"arch {dataset.model.arch!r} is unknown here, so is its bucket size; name a known arch",
        )
    return [
        placement(
            image_size,
            r,
            divisibility,
            scale=dataset.scale,
            buckets=dataset.buckets,
            square_crop=dataset.square_crop,
            random_crop=dataset.random_crop,
        )
        for r in dataset.resolutions
    ]


def latent_info(
    filename: str,
    where: Placement,
    dataset: AiToolkitDataset,
    *,
    flip_x: bool = False,
    flip_y: bool = False,
    is_video: bool = False,
) -> dict[str, Any]:
    """The info dict of one latent file, keys in ai-toolkit's order (``filename``: the image's base name)."""
    if where.crop_x is None or where.crop_y is None:
        raise ValueError("a random crop is not known from the config: read it from the file's metadata")
    info: dict[str, Any] = {
        "filename": filename,
        "scale_to_width": where.scale_to_width,
        "scale_to_height": where.scale_to_height,
        "crop_x": where.crop_x,
        "crop_y": where.crop_y,
        "crop_width": where.crop_width,
        "crop_height": where.crop_height,
        "latent_space_version": dataset.model.latent_space_version,
        "latent_version": LATENT_VERSION,
    }
    if flip_x:
        info["flip_x"] = True
    if flip_y:
        info["flip_y"] = True
    video = False
    if is_video and dataset.auto_frame_count:
        info["auto_frame_count"] = True
        if dataset.trim_auto_frame_count_tail:
            info["trim_auto_frame_count_tail"] = True
        video = True
    elif is_video and dataset.num_frames > 1:
        info["num_frames"] = dataset.num_frames
        video = True
    if video and dataset.fps != 24:
        info["fps"] = dataset.fps
    if video and dataset.do_i2v:
        info["do_i2v"] = True
    if video and dataset.do_audio:
        info["do_audio"] = True
        if dataset.audio_normalize:
            info["audio_normalize"] = True
        if dataset.audio_preserve_pitch:
            info["audio_preserve_pitch"] = True
    if dataset.cache_tensors_to_disk:
        info["cache_tensors_to_disk"] = True
    return info


def text_info(
    caption: str,
    text_embedding_space_version: str,
    *,
    control_path: str | Sequence[str] | None = None,
    control_videos: Sequence[str] = (),
    first_frame_in_te: bool = False,
) -> dict[str, Any]:
    """The info dict of one text-embedding file. The control keys apply only to models that encode
    control images into the text embeddings (``encode_control_in_text_embeddings``); leave them out
    for a dropout (blank) embedding, which ai-toolkit builds with ``text_only``."""
    info: dict[str, Any] = {"caption": caption, "text_embedding_space_version": text_embedding_space_version}
    info["text_embedding_version"] = TEXT_EMBEDDING_VERSION
    if control_path is not None:
        info["control_path"] = control_path if isinstance(control_path, str) else list(control_path)
    if control_videos:
        info["control_videos"] = sorted(control_videos)
        info["control_videos_version"] = 2
    elif first_frame_in_te:
        info["first_frame_in_te"] = True
    return info


def settings_hash(info: Mapping[str, Any]) -> str:
    """The 22-character hash in a cache file's name."""
    digest = hashlib.md5(json.dumps(info, sort_keys=True).encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").replace("=", "")


def _cache_path(folder: str, image_path: str, info: Mapping[str, Any]) -> str:
    stem = os.path.splitext(os.path.basename(image_path))[0]
    return os.path.join(os.path.dirname(image_path), folder, f"{stem}_{settings_hash(info)}.safetensors")


def latent_name(image_path: str, info: Mapping[str, Any]) -> str:
    """``<image dir>/_latent_cache/<stem>_<hash>.safetensors``."""
    return _cache_path(LATENT_DIR, image_path, info)


def text_name(image_path: str, info: Mapping[str, Any]) -> str:
    """``<image dir>/_t_e_cache/<stem>_<hash>.safetensors``."""
    return _cache_path(TEXT_DIR, image_path, info)


def split_name(filename: str) -> tuple[str, str] | None:
    """``(image stem, hash)`` of a cache file's base name, or None if it is not one."""
    base, ext = os.path.splitext(filename)
    if ext != ".safetensors" or len(base) < HASH_LENGTH + 2 or base[-HASH_LENGTH - 1] != "_":
        return None
    digest = base[-HASH_LENGTH:]
    if not all(c.isalnum() or c in "-_" for c in digest):
        return None
    return base[: -HASH_LENGTH - 1], digest


def metadata_for(info: Mapping[str, Any], software: Mapping[str, str] = SOFTWARE) -> dict[str, str]:
    """The safetensors metadata ai-toolkit writes for ``info`` (``get_meta_for_safetensors``)."""
    meta: dict[str, Any] = {**json.loads(json.dumps(dict(info))), "software": dict(software)}
    out = {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}
    out["format"] = "pt"
    return out


def info_from_metadata(metadata: Mapping[str, str] | None) -> dict[str, Any] | None:
    """The info dict back from a latent file's metadata (``software``/``format`` dropped), in
    ai-toolkit's key order; ``settings_hash`` of it should equal the hash in the file's name.
    None when the file has no ai-toolkit metadata (text-embedding files never do)."""
    if not metadata or "filename" not in metadata or "latent_version" not in metadata:
        return None
    out: dict[str, Any] = {}
    keys = [k for k in _LATENT_ORDER if k in metadata] + [k for k in metadata if k not in _LATENT_ORDER]
    for key in keys:
        if key in ("software", "format"):
            continue
        value = metadata[key]
        if key in _STRING_KEYS:
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def image_size(path: str, exif: bool = True) -> tuple[int, int]:
    """``(W, H)`` as ai-toolkit records it: after EXIF rotation (``exif_transpose``,
    data_transfer_object/data_loader.py:150-160); ``exif=False`` for ``fast_image_size``, which
    reads the stored size."""
    from PIL import Image

    with Image.open(path) as image:
        w, h = image.size
        if exif and image.getexif().get(0x0112, 1) in (5, 6, 7, 8):
            return h, w
        return w, h
