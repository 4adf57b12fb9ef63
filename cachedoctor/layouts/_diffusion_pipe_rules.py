"""tdrussell/diffusion-pipe's dataset rules (commit 8f83dbf), re-implemented from reading its code:
the dataset TOML as ``utils/dataset.py`` ``DirectoryDataset`` merges it, the aspect-ratio / size /
frame buckets an image falls in, the cache folder names, and the order items are cached in.

diffusion-pipe caches per ``[[directory]]`` under ``<path>/cache/<model name>/`` (dataset.py:482).
An image goes to the AR bucket nearest in log space (dataset.py:838-852) and, per resolution, to
the size bucket ``(ar, w, h, frames)`` whose area is ``res**2`` (dataset.py:419-425), cached in
``cache_<ar:.3f>x<w>x<h>x<frames>/latents`` (dataset.py:60-71, 217, 240). With ``size_buckets`` the
key is ``(w, h, frames)``. Items are written in dataset order: files sorted, shuffled with a seed
from the directory path (dataset.py:628-708), grouped, then shuffled per size bucket with a seed
from its key (dataset.py:211-212); HF ``datasets`` shuffles with ``np.random.default_rng(seed)``.
Bugs kept on purpose (the cache is what diffusion-pipe wrote): see ``_size_bucket_candidates``.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from cachedoctor import toml
from cachedoctor.layouts.interface import LayoutError

ROUND_DECIMAL_DIGITS = 3  # dataset.py:36
IMAGE_SIZE_ROUND_TO_MULTIPLE = 32  # dataset.py:33 (defined, unused: the model's multiple is used)
SKIPPED_SUFFIXES = (".txt", ".npz", ".json", ".parquet", ".bak", ".db")  # dataset.py:650, case-sensitive
CAPTIONS_JSON_FILE = "captions.json"  # dataset.py:35
#: model.type (train.py:310-382) -> the class's ``name`` (the cache folder); some pick another name from
#: the weights: ALT_MODEL_NAMES. ltx-video's name is its ``single_file_path`` stem (ltx_video.py:40).
MODEL_NAMES = {
    "flux": "flux", "ltx-video": "ltx-video", "hunyuan-video": "hunyuan-video", "sdxl": "sdxl",
    "cosmos": "cosmos", "lumina_2": "lumina_2", "wan": "wan", "chroma": "chroma", "hidream": "hidream",
    "sd3": "sd3", "cosmos_predict2": "cosmos_predict2", "anima": "cosmos_predict2", "omnigen2": "omnigen2",
    "qwen_image": "qwen_image", "hunyuan_image": "hunyuan_image", "auraflow": "auraflow", "z_image": "z_image",
    "hunyuan_video_15": "hunyuan_video_1.5", "flux2": "flux2", "ernie_image": "ernie_image", "ltx2": "ltx2",
    "ideogram4": "ideogram4", "krea2": "krea2", "minimax_h3": "minimax_h3",
}  # fmt: skip
ALT_MODEL_NAMES = {
    "wan": ("skyreels_v2", "wan2.2_i2v", "skyreels_v2_i2v", "wan_i2v", "wan_flf2v", "wan2.2_5b"),  # wan.py:124-165
    "cosmos_predict2": ("anima",),  # cosmos_predict2.py:268 (a Qwen3 text encoder)
    "anima": ("anima",),
    "flux2": ("flux2_klein_4b", "flux2_klein_9b"),  # flux2.py:46-49
}
#: model name -> ``pixels_round_to_multiple`` (base.py:218 default 16); the size buckets are rounded to it
PIXELS_ROUND_TO_MULTIPLE = {"hunyuan_image": 32, "ltx-video": 32, "wan2.2_5b": 32}

BucketKey = tuple[Any, ...]


@dataclass(frozen=True)
class DPipeDirectory:
    """One ``[[directory]]``, its settings merged with the top level as ``DirectoryDataset`` does."""

    path: str  # as written; diffusion-pipe resolves it against the folder it runs in
    resolved: str  # absolute, against ``base``
    num_repeats: int = 1
    enable_ar_bucket: bool = False
    resolutions: tuple[float, ...] = ()  # side lengths, deduplicated and sorted (empty with size_buckets)
    ars: tuple[float, ...] = (1.0,)  # width / height, rounded to 3 digits, sorted
    frame_buckets: tuple[int, ...] = (1,)
    size_buckets: tuple[BucketKey, ...] | None = None  # (w, h, frames), longest frames first
    shuffle_metadata: bool = True
    skip_empty_caption: bool = True
    cache_shuffle_num: int = 0
    shuffle_tags: bool = False
    caption_prefix: str = ""
    mask_path: str | None = None
    control_path: str | None = None

    def cache_root(self, model_name: str) -> str:
        return cache_root(self.resolved, model_name)


@dataclass(frozen=True)
class DPipeConfig:
    path: str
    directories: tuple[DPipeDirectory, ...]
    subsample_ratio: float | None = None


def load_dataset_config(path: str, base: str | None = None) -> DPipeConfig:
    """Reads a diffusion-pipe dataset TOML; relative directory paths are taken from ``base``
    (default: the current folder, as diffusion-pipe does)."""
    try:
        with open(path, "rb") as handle:
            data = toml.load(handle)
    except OSError as exc:
        raise LayoutError(path, f"cannot read the dataset config ({exc.strerror}); check the path") from None
    except toml.decode_error() as exc:
        raise LayoutError(path, f"not valid TOML ({exc}); fix the file") from None
    return parse_dataset_config(data, path, base)


def parse_dataset_config(data: Mapping[str, Any], path: str, base: str | None = None) -> DPipeConfig:
    entries = data.get("directory")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, Mapping) for e in entries):
        raise LayoutError(path, "no [[directory]] table; add one with path = '<image folder>'")
    dirs = tuple(_directory(entry, data, path, base or os.getcwd()) for entry in entries)
    ratio = data.get("subsample_ratio")
    return DPipeConfig(path, dirs, float(ratio) if ratio else None)


def _directory(entry: Mapping[str, Any], top: Mapping[str, Any], path: str, base: str) -> DPipeDirectory:
    def get(key: str, default: Any) -> Any:  # directory, then top level, then default (dataset.py:458-513, 731-736)
        return entry.get(key, top.get(key, default))

    raw = entry.get("path")
    if not isinstance(raw, str) or not raw:
        raise LayoutError(path, "a [[directory]] has no path; set path = '<image folder>'")
    repeats = get("num_repeats", 1)
    if not isinstance(repeats, int) or repeats <= 0:
        raise LayoutError(path, f"num_repeats must be a positive integer, got {repeats!r}; fix {raw}'s entry")
    enable_ar = bool(get("enable_ar_bucket", False))
    size_buckets = get("size_buckets", None)
    resolutions: tuple[float, ...] = ()
    try:
        if size_buckets is not None:
            buckets = sorted((tuple(b) for b in size_buckets), key=lambda t: t[-1], reverse=True)  # stable, :464
            if not all(len(b) == 3 for b in buckets):
                raise ValueError("size_buckets entries must be [width, height, frames]")
            size_buckets = tuple(buckets)
            ars = _dedup_and_sort(w / h for w, h, _ in size_buckets)
        else:
            if "resolutions" not in top:  # dataset.py:469 reads dataset_config['resolutions'] eagerly
                raise ValueError("resolutions must be set at the top level (KeyError in diffusion-pipe)")
            resolutions = _dedup_and_sort(_area_side(r) for r in get("resolutions", None))
            if not enable_ar:
                ars = (1.0,)
            elif user_ars := get("ar_buckets", None):  # an empty list falls through, like the walrus at :499
                ars = _dedup_and_sort((a[0] / a[1] if isinstance(a, (list, tuple)) else a) for a in user_ars)
            else:  # dataset.py:502-504: the top-level value is read even when the directory sets one
                missing = [k for k in ("min_ar", "max_ar", "num_ar_buckets") if k not in top]
                if missing:
                    raise ValueError(f"{', '.join(missing)} must be set at the top level (KeyError in diffusion-pipe)")
                ars = _geomspace_ars(get("min_ar", None), get("max_ar", None), get("num_ar_buckets", None))
        frames = list(get("frame_buckets", [1]))
        frame_buckets = tuple(sorted(frames if 1 in frames else [*frames, 1]))
    except (TypeError, ValueError, ZeroDivisionError, IndexError) as exc:
        raise LayoutError(path, f"bad bucket settings for {raw} ({exc}); see diffusion-pipe's dataset.toml") from None
    return DPipeDirectory(
        raw, os.path.normpath(os.path.join(base, raw)), repeats, enable_ar, resolutions, ars, frame_buckets,
        size_buckets, bool(get("shuffle_metadata", True)),
        bool(get("skip_empty_caption", True)), int(get("cache_shuffle_num", 0)), bool(get("shuffle_tags", False)),
        str(get("caption_prefix", "")), entry.get("mask_path"), entry.get("control_path"),
    )  # fmt: skip


def _area_side(res: Any) -> float:
    if isinstance(res, (list, tuple)):  # (width, height): the side of the square of the same area (:882-889)
        if len(res) != 2:
            raise ValueError(f"resolution {res!r} is not [width, height]")
        return math.sqrt(res[0] * res[1])
    if not isinstance(res, (int, float)) or isinstance(res, bool) or res <= 0:
        raise ValueError(f"resolution {res!r} is not a positive number")
    return float(res)


def _dedup_and_sort(values: Any) -> tuple[float, ...]:
    return tuple(sorted({round(x, ROUND_DECIMAL_DIGITS) for x in values}))  # dataset.py:74-78


def _geomspace_ars(min_ar: Any, max_ar: Any, num: Any) -> tuple[float, ...]:
    """``np.geomspace(min_ar, max_ar, num)`` (dataset.py:505), rounded to 3 digits, deduplicated
    and sorted (506), in plain Python: planning imports no numpy. Endpoints exact as numpy's; the
    steps in between agree with numpy's to the last bits, far below the rounding (checked against
    numpy on 20,000 random settings in the tests)."""
    lo, hi, n = float(min_ar), float(max_ar), int(num)
    if n < 1 or lo <= 0 or hi <= 0:
        raise ValueError(f"num_ar_buckets {num!r} with min_ar {min_ar!r}, max_ar {max_ar!r}")
    if n == 1:
        values = [lo]
    else:
        step = (math.log10(hi) - math.log10(lo)) / (n - 1)
        values = [lo, *(10 ** (math.log10(lo) + step * i) for i in range(1, n - 1)), hi]
    return tuple(sorted({round(x, ROUND_DECIMAL_DIGITS) for x in values}))


def round_to_nearest_multiple(x: float, multiple: int) -> int:
    return int(round(x / multiple) * multiple)  # utils/common.py:106-107 (round half to even)


def group_key(image_size: tuple[int, int], frames: int, d: DPipeDirectory) -> BucketKey | None:
    """The metadata grouping key (``ar_bucket`` ``(ar, frames)`` or a size bucket), or None when
    diffusion-pipe drops the item (a video shorter than every frame bucket). ``image_size`` is
    PIL's ``(width, height)`` before any EXIF rotation (dataset.py:798-799)."""
    width, height = image_size
    log_ar = math.log(width / height)
    is_video = frames > 1
    if d.size_buckets is not None:
        for bucket in _size_bucket_candidates(log_ar, d):  # dataset.py:854-871
            if is_video and bucket[-1] == 1:
                continue
            if frames >= bucket[-1]:
                return bucket
        return None
    diffs = [abs(log_ar - math.log(ar)) for ar in d.ars]
    i = diffs.index(min(diffs))  # np.argmin: the first of equal distances
    fitting = [f for f in d.frame_buckets if frames - f >= 0]
    if not fitting or (is_video and fitting[-1] == 1):
        return None
    return (d.ars[i], fitting[-1])


def _size_bucket_candidates(log_ar: float, d: DPipeDirectory) -> list[BucketKey]:
    """dataset.py:856-857 sorts the *deduplicated, sorted* ARs by distance and uses those indices
    into ``size_buckets`` (sorted by frames): right only when the buckets' ARs are distinct and
    ascending. Several frame lengths per AR leave fewer candidates than buckets. Kept as is."""
    assert d.size_buckets is not None
    diffs = [abs(log_ar - math.log(ar)) for ar in d.ars]
    order = sorted(range(len(diffs)), key=lambda k: diffs[k])  # argsort(kind='stable')
    return [d.size_buckets[k] for k in order if k < len(d.size_buckets)]


def size_buckets(group: BucketKey, d: DPipeDirectory, round_to: int = 16) -> list[BucketKey]:
    """The size buckets (cache folder keys) a group is cached in: per resolution
    ``(ar, w, h, frames)`` with ``w * h`` about ``res**2`` (dataset.py:419-427), or the size bucket."""
    if d.size_buckets is not None:
        return [tuple(group)]
    ar, frames = group
    keys = []
    for res in d.resolutions:
        area = res**2
        w = math.sqrt(area * ar)
        keys.append((ar, round_to_nearest_multiple(w, round_to), round_to_nearest_multiple(area / w, round_to), frames))
    return keys


def bucket_for(image_size: tuple[int, int], frames: int, d: DPipeDirectory, round_to: int = 16) -> list[BucketKey]:
    group = group_key(image_size, frames, d)
    return [] if group is None else size_buckets(group, d, round_to)


def bucket_suffix(key: Sequence[Any]) -> str:
    """dataset.py:60-71."""
    if len(key) == 2:
        return f"{key[0]:.{ROUND_DECIMAL_DIGITS}f}_{key[1]}"
    if len(key) == 3:
        return f"{key[0]}x{key[1]}x{key[2]}"
    if len(key) == 4:
        return f"{key[0]:.{ROUND_DECIMAL_DIGITS}f}x{key[1]}x{key[2]}x{key[3]}"
    raise ValueError(f"unexpected bucket {key!r}")


def cache_folder_name(key: Sequence[Any]) -> str:
    """``cache_<suffix>``: latents, iteration_order (and with size_buckets, text embeddings) (:217)."""
    return f"cache_{bucket_suffix(key)}"


def legacy_cache_folder_name(key: Sequence[Any]) -> str:
    """The older ``cache_<w>x<h>x<frames>`` name of an AR size bucket, renamed on sight (:220-224)."""
    return cache_folder_name(key[1:])


def ar_frames_folder_name(group: Sequence[Any]) -> str:
    """``ar_frames_<ar>_<frames>``: an AR group's text embeddings and size-bucket metadata (:408)."""
    return f"ar_frames_{bucket_suffix(group)}"


def cache_root(dataset_dir: str, model_name: str) -> str:
    return os.path.join(dataset_dir, "cache", model_name)  # dataset.py:482


def resized_size(key: Sequence[Any], round_width: int = 16, round_height: int = 16) -> tuple[int, int]:
    """The (width, height) ``PreprocessMediaFile`` fits the image to (base.py:166-174)."""
    return round_to_nearest_multiple(key[-3], round_width), round_to_nearest_multiple(key[-2], round_height)


def seed_from_hash(value: str) -> int:
    """dataset.py:81-82, on ``str(item)``: a directory's ``str(Path(path))``, a key's tuple repr."""
    return int(hashlib.md5(value.encode()).hexdigest(), 16) % int(1e9)


def permutation(n: int, seed: int) -> list[int]:
    """HF ``Dataset.shuffle(seed=...)``: ``np.random.default_rng(seed).permutation(n)``."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n)] if n else []


def listed(names: Sequence[str]) -> list[str]:
    """The directory entries diffusion-pipe lists as media (sorted; :628-651); files only, the
    caller drops folders. Unreadable files and images without a caption stay in the list: they
    take part in the shuffle and are dropped afterwards (:754-757, :801-803)."""
    return [n for n in sorted(names) if os.path.splitext(n)[1] not in SKIPPED_SUFFIXES]


def directory_order(d: DPipeDirectory, count: int) -> list[int]:
    """Indices into ``listed(...)`` in the order diffusion-pipe keeps the directory's metadata."""
    seed = seed_from_hash(str(PurePath(d.path)))  # str(Path(...)): no trailing slash, no "./" (no ".." folding)
    return permutation(count, seed) if d.shuffle_metadata else list(range(count))


def size_bucket_order(key: BucketKey, count: int) -> list[int]:
    """Indices into a group's items (in directory order) in the order its size bucket's cache holds them."""
    return permutation(count, seed_from_hash(repr(tuple(key))))
