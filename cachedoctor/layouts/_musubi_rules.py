"""kohya-ss/musubi-tuner's cache rules, re-implemented from reading its code at commit 30c658c, so
a layout can say which file each dataset item should have, with which keys, without musubi.
Plain functions of plain values (no torch, no numpy): the tests hold them to musubi's goldens.
The architectures are in ``_musubi_archs``, buckets and clip windows in ``_musubi_buckets`` (both
re-exported here), the dataset TOML in ``_musubi_config``.

Paths are below ``src/musubi_tuner/``; ``ivd`` is ``dataset/image_video_dataset.py``.

* Names: ``BaseDataset.get_latent_cache_path`` / ``get_text_encoder_output_cache_path``
  (ivd:152-171): ``<stem>_<W:04d>x<H:04d>_<arch>.safetensors`` and ``<stem>_<arch>_te.safetensors``
  in the dataset's cache directory; a clip window's item key (ivd:775-776) puts
  ``_<start:05d>-<frames:03d>`` after the stem; FramePack adds ``-<section:04d>`` to that token
  (``fpack_cache_latents.py:433-436``). Training globs ``*_<arch>.safetensors`` and splits the names
  back (``prepare_for_training``: ivd:504-534 images, ivd:857-884 clips).
* Keys: ``dataset/cache_io.py`` (per arch in ``_musubi_archs``); what training makes of them
  (``BucketBatchManager.__getitem__``, ``bucket.py:239-283``); the dtype names
  (``utils/model_utils.py:92-95``, ``159-187``).
* Metadata: ``save_latent_cache_common`` (cache_io.py:305-324), ``save_text_encoder_output_cache_common``
  (cache_io.py:487-532).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from cachedoctor.layouts._musubi_archs import ARCHS, Arch, arch_of
from cachedoctor.layouts._musubi_buckets import (
    EXTRACTIONS,
    ResizePlan,
    Size,
    argmin,
    bucket_resolution,
    bucket_resolutions,
    divisible_by,
    frame_windows,
    loaded_frames,
    resize_plan,
    round_target_frames,
    video_bucket_resolution,
)

__all__ = [
    "ARCHS",
    "EXTRACTIONS",
    "Arch",
    "Parsed",
    "ResizePlan",
    "Size",
    "arch_of",
    "argmin",
    "bucket_resolution",
    "bucket_resolutions",
    "divisible_by",
    "frame_windows",
    "image_items",
    "latent_cache_name",
    "loaded_frames",
    "parse_cache_name",
    "resize_plan",
    "round_target_frames",
    "te_cache_name",
    "video_bucket_resolution",
    "video_items",
]

FORMAT_VERSION = "1.0.1"  # cache_io.py:310, 505
#: every name dtype_to_str gives (torch 2.14's dtypes), longest first: what remove_dtype_suffix strips
DTYPES = (
    "float4_e2m1fn_x2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float8_e4m3fn", "float8_e5m2",
    "complex128", "bcomplex32", "complex32", "complex64", "bfloat16", "quint4x2", "quint2x4", "float32", "bits2x4",
    "float64", "float16", "bits1x8", "bits4x2", "uint16", "qint32", "uint32", "quint8", "bits16", "uint64", "uint5",
    "int64", "qint8", "uint4", "uint7", "int16", "uint6", "uint1", "uint8", "uint2", "int32", "bits8", "uint3", "int2",
    "int6", "int4", "bool", "int8", "int7", "int3", "int1", "int5",
)  # fmt: skip


#: media_utils.py:21-55 (``.jxl`` too where a JPEG-XL Pillow plugin is installed, 24-32); case-sensitive globs
IMAGE_EXTENSIONS = (
    ".png",
    ".jpg",
    ".jpeg",
    ".webp",
    ".bmp",
    ".PNG",
    ".JPG",
    ".JPEG",
    ".WEBP",
    ".BMP",
    ".avif",
    ".AVIF",
)
VIDEO_EXTENSIONS = tuple(
    e
    for x in ("mp4", "webm", "avi", "mkv", "mov", "flv", "wmv", "m4v", "mpg", "mpeg")
    for e in (f".{x}", f".{x.upper()}")
)


def image_items(directory: str, caption_extension: str | None) -> list[str]:
    """``glob_images`` (media_utils.py:58-82): the images of a folder (not below it, no dot files), sorted,
    only those with a caption file: a ``*<caption_extension>`` file whose name less its last extension
    is the image's (so a caption_extension such as ``_cap.txt`` matches no image at all)."""
    paths = {p for ext in IMAGE_EXTENSIONS for p in glob.glob(os.path.join(glob.escape(directory), "*" + ext))}
    if caption_extension is not None:
        pattern = os.path.join(glob.escape(directory), "*" + caption_extension)
        bases = {_stem(p) for p in glob.glob(pattern)}
        paths = {p for p in paths if _stem(p) in bases}
    return sorted(paths)


def video_items(directory: str) -> list[str]:
    """``glob_videos`` (media_utils.py:85-94): the clips of a folder, sorted; no caption filter (a clip
    without its caption file stops musubi's caching)."""
    return sorted({p for ext in VIDEO_EXTENSIONS for p in glob.glob(os.path.join(glob.escape(directory), "*" + ext))})


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def window_item_key(video_key: str, window: tuple[int, int]) -> str:
    """A clip window's item key (ivd:775-776): ``<body>_<start:05d>-<frames:03d><ext>``."""
    body, ext = os.path.splitext(video_key)
    return f"{body}_{window[0]:05d}-{window[1]:03d}{ext}"


def latent_cache_name(
    item_key: str, original_size: Size, arch: str, window: tuple[int, int] | None = None, section: int | None = None
) -> str:
    """The latent file's name (ivd:152-166). ``item_key`` is the image or clip path as the datasource
    gives it; ``original_size`` the image's own size, or for a clip its bucket (the resized frame).
    ``section``: FramePack's per-section files (``fpack_cache_latents.py:433-436``)."""
    key = window_item_key(item_key, window) if window is not None else item_key
    name = f"{_stem(key)}_{original_size[0]:04d}x{original_size[1]:04d}_{arch}.safetensors"
    if section is not None:
        tokens = name.split("_")
        tokens[-3] = f"{tokens[-3]}-{section:04d}"
        name = "_".join(tokens)
    return name


def te_cache_name(item_key: str, arch: str) -> str:
    """The text-encoder file's name (ivd:168-171); a clip's is its path's, one for all its windows."""
    return f"{_stem(item_key)}_{arch}_te.safetensors"


@dataclass(frozen=True, slots=True)
class Parsed:
    """A cache file name as ``prepare_for_training`` reads it."""

    item_key: str  # the stem its text-encoder file is named after
    arch: str
    is_te: bool
    size: Size | None = None  # (W, H) from WWWWxHHHH (None for a text-encoder file)
    window: tuple[int, int] | None = None  # a clip's (start, frames)
    section: int | None = None  # FramePack's section index

    @property
    def te_name(self) -> str:
        return f"{self.item_key}_{self.arch}_te.safetensors"


_WINDOW = re.compile(r"^(\d+)-(\d+)(?:-(\d+))?$")


def parse_cache_name(name: str, kind: str | None = None) -> Parsed | None:
    """Split a file name as musubi's training does (ivd:513-521 images, ivd:865-876 clips): ``_``
    tokens, the size the second last (``WxH``), a clip's window the third last (``start-frames``,
    FramePack ``start-frames-section``), the key the rest. ``kind`` "image" or "video" says which
    dataset globbed it; ``None`` takes a third-last ``N-N`` token as a window. ``None`` for a name
    that is not a musubi cache file; such a ``*_<arch>.safetensors`` makes musubi's training stop
    with a ValueError (its size token does not parse)."""
    base = os.path.basename(name)
    if not base.endswith(".safetensors"):
        return None
    tokens = base[: -len(".safetensors")].split("_")
    if len(tokens) >= 3 and tokens[-1] == "te":
        return Parsed("_".join(tokens[:-2]), tokens[-2], True) if tokens[-2] else None
    if len(tokens) < 3:
        return None
    sides = tokens[-2].split("x")
    if len(sides) != 2 or not all(s.isdigit() for s in sides):
        return None
    size = (int(sides[0]), int(sides[1]))
    match = _WINDOW.match(tokens[-3])
    if kind == "video" or (kind is None and match is not None and len(tokens) >= 4):
        if match is None:
            return None
        section = int(match.group(3)) if match.group(3) is not None else None
        window = (int(match.group(1)), int(match.group(2)))
        return Parsed("_".join(tokens[:-3]), tokens[-1], False, size, window, section)
    return Parsed("_".join(tokens[:-2]), tokens[-1], False, size)


def strip_dtype(key: str) -> str:
    """``remove_dtype_suffix`` (model_utils.py:176-187): the key without a trailing ``_<dtype>``."""
    for dtype in DTYPES:
        if key.endswith("_" + dtype):
            return key[: -len(dtype) - 1]
    return key


@dataclass(frozen=True, slots=True)
class LatentKey:
    family: str  # "latents", "latents_image", "latents_control_0", "latents_clean_2x"
    frames: int | None  # None where the key has no F (FLUX.2, HiDream-O1 controls)
    height: int
    width: int
    dtype: str


_SHAPE = re.compile(r"^(latents(?:_[a-z0-9]+)*?)_(?:(\d+)x)?(\d+)x(\d+)$")


def parse_latent_key(key: str) -> LatentKey | None:
    """A ``latents...`` key's parts; ``None`` for other keys (``clip_bfloat16``, ``f_indices_int32``)."""
    stripped = strip_dtype(key)
    match = _SHAPE.match(stripped) if stripped != key else None
    if match is None:
        return None
    frames = int(match.group(2)) if match.group(2) is not None else None
    return LatentKey(match.group(1), frames, int(match.group(3)), int(match.group(4)), key[len(stripped) + 1 :])


def latent_key(arch_name: str, height: int, width: int, dtype: str, frames: int = 1) -> str:
    """The main latent's key: ``latents_<F>x<H>x<W>_<dtype>``; FLUX.2 has no ``<F>`` (cache_io.py:152)."""
    shape = (
        f"{height}x{width}"
        if arch_of(arch_name).latent_keys[0].startswith("latents_{H}")
        else f"{frames}x{height}x{width}"
    )
    return f"latents_{shape}_{dtype}"


def loaded_as(key: str) -> tuple[str, bool]:
    """What training calls a key and whether it is ragged (``BucketBatchManager.__getitem__``,
    bucket.py:247-276): ``varlen_`` dropped (not stacked), the dtype dropped (not after ``_mask``),
    a ``latents_`` key's last ``_`` part (its shape) dropped. The shape in a key is never checked."""
    varlen = key.startswith("varlen_")
    name = key.removeprefix("varlen_") if varlen else key
    if not name.endswith("_mask"):
        name = strip_dtype(name)
        if name.startswith("latents_"):
            name = name.rsplit("_", 1)[0]
    return name, varlen


def latent_metadata(arch_name: str, original_size: Size, frame_count: int | None = None) -> dict[str, str]:
    """A latent file's safetensors metadata (cache_io.py:305-313); ``frame_count`` only for a clip window."""
    meta = {
        "architecture": arch_of(arch_name).metadata_name,
        "width": f"{original_size[0]}",
        "height": f"{original_size[1]}",
    }
    meta["format_version"] = FORMAT_VERSION
    if frame_count is not None:
        meta["frame_count"] = f"{frame_count}"
    return meta
