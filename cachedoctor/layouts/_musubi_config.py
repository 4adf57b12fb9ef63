"""kohya-ss/musubi-tuner's dataset config (``--dataset_config``, TOML or JSON), read as musubi reads
it at commit 30c658c, so the layout plans from the datasets musubi built, with its defaults.

Written from ``src/musubi_tuner/dataset/config_utils.py``: ``load_user_config`` (363-417: by file
suffix; three deprecated keys renamed), ``ConfigSanitizer`` (94-212: voluptuous schemas, unknown keys
refused, types checked by ``isinstance``: ``source_fps = 30`` is refused, it must be ``30.0``),
``BlueprintGenerator`` (215-264: each value from the dataset, then ``[general]``, then the caching or
training script's command line, then the ``*DatasetParams`` defaults at 32-75) and
``generate_dataset_group_by_blueprint`` (267-292: cache directories must differ, compared as written).
``[general]`` only carries ``resolution``, ``enable_bucket``, ``bucket_no_upscale``,
``caption_extension``, ``batch_size`` and ``num_repeats``. A dataset is a video one when it has
``video_directory`` or ``video_jsonl_file`` (schema, 162-166) and no ``image_directory`` /
``image_jsonl_file`` (blueprint, 231). The dataset classes then adjust (``image_video_dataset.py``):
``bucket_no_upscale`` is off without buckets (132-133), ``cache_directory`` defaults to the
image/video directory (341-342, 673-674), ``target_frames`` are rounded to N*4+1 (644-659) and
``uniform`` with one sample becomes ``head`` (666-668).

musubi takes relative paths from the folder it runs in; here they are taken from ``base`` (default:
the config's own folder). Configs musubi could not cache with (no dataset source, no caption
extension for a folder, no cache directory for a JSONL dataset, a bad frame extraction, two
datasets sharing a cache directory, a clip dataset for an image-only arch) raise ``LayoutError``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachedoctor import toml
from cachedoctor.layouts._musubi_archs import arch_of
from cachedoctor.layouts._musubi_buckets import EXTRACTIONS, Size, round_target_frames
from cachedoctor.layouts.interface import LayoutError

_PAIR = "int or [int, int]"
ASCENDABLE: dict[str, Any] = {  # config_utils.py:112-119, the only keys [general] may hold
    "caption_extension": str,
    "batch_size": int,
    "num_repeats": int,
    "resolution": _PAIR,
    "enable_bucket": bool,
    "bucket_no_upscale": bool,
}
IMAGE_KEYS: dict[str, Any] = {  # config_utils.py:120-132
    **ASCENDABLE,
    **dict.fromkeys(("image_directory", "image_jsonl_file", "cache_directory", "control_directory"), str),
    **{"multiple_target": bool, "fp_latent_window_size": int, "fp_1f_clean_indices": [int]},
    **{"fp_1f_target_index": int, "fp_1f_no_post": bool, "no_resize_control": bool, "control_resolution": _PAIR},
}
VIDEO_KEYS: dict[str, Any] = {  # config_utils.py:133-145
    **ASCENDABLE,
    **dict.fromkeys(("video_directory", "video_jsonl_file", "control_directory", "frame_extraction"), str),
    **{"target_frames": [int], "frame_stride": int, "frame_sample": int, "max_frames": int},
    **{"cache_directory": str, "source_fps": float, "fp_latent_window_size": int},
}
DEFAULTS: dict[str, Any] = {  # BaseDatasetParams, ImageDatasetParams, VideoDatasetParams (config_utils.py:32-75)
    **{"resolution": (960, 544), "enable_bucket": False, "bucket_no_upscale": False, "caption_extension": None},
    **{"batch_size": 1, "num_repeats": 1, "cache_directory": None, "control_directory": None},
    **{"image_directory": None, "image_jsonl_file": None, "multiple_target": False, "fp_latent_window_size": 9},
    **{"fp_1f_clean_indices": None, "fp_1f_target_index": None, "fp_1f_no_post": False, "no_resize_control": False},
    **{"control_resolution": None, "video_directory": None, "video_jsonl_file": None, "target_frames": (1,)},
    **{"frame_extraction": "head", "frame_stride": 1, "frame_sample": 1, "max_frames": 129, "source_fps": None},
}
DEPRECATED = {  # config_utils.py:388-392
    "flux_kontext_no_resize_control": "no_resize_control",
    "qwen_image_edit_no_resize_control": "no_resize_control",
    "qwen_image_edit_control_resolution": "control_resolution",
}
_PATHS = (
    "image_directory",
    "image_jsonl_file",
    "video_directory",
    "video_jsonl_file",
    "cache_directory",
    "control_directory",
)


@dataclass(frozen=True, slots=True)
class MusubiDataset:
    """One ``[[datasets]]`` entry as musubi's ImageDataset / VideoDataset holds it (paths resolved)."""

    index: int
    kind: str  # "image" or "video"
    cache_directory: str  # where its _<arch>.safetensors and _<arch>_te.safetensors files are
    resolution: Size  # (W, H)
    enable_bucket: bool
    bucket_no_upscale: bool  # never on without enable_bucket
    caption_extension: str | None  # None only for a JSONL dataset (captions in the JSONL)
    batch_size: int
    num_repeats: int
    image_directory: str | None = None
    image_jsonl_file: str | None = None
    video_directory: str | None = None
    video_jsonl_file: str | None = None
    control_directory: str | None = None
    target_frames: tuple[int, ...] = ()  # video: rounded to N*4+1, sorted, unique
    frame_extraction: str | None = None  # video: head, chunk, slide, uniform, full
    frame_stride: int = 1
    frame_sample: int = 1
    max_frames: int = 129
    source_fps: float | None = None
    fp_latent_window_size: int = 9
    fp_1f_clean_indices: tuple[int, ...] | None = None
    fp_1f_target_index: int | None = None
    fp_1f_no_post: bool = False
    multiple_target: bool = False
    no_resize_control: bool = False
    control_resolution: Size | None = None


def _read(path: str) -> dict[str, Any]:
    name = path.lower()
    try:
        if name.endswith(".toml"):
            with open(path, "rb") as handle:
                return toml.load(handle)
        if name.endswith(".json"):
            with open(path, encoding="utf-8") as handle:
                loaded = json.load(handle)
            if not isinstance(loaded, dict):
                raise LayoutError(
                    path, "the JSON is not an object with general and datasets; musubi-tuner cannot read it"
                )
            return loaded
    except OSError as error:
        raise LayoutError(path, f"cannot read the dataset config ({error.strerror}); check the path") from None
    except (ValueError, UnicodeDecodeError) as error:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise LayoutError(path, f"not valid TOML/JSON ({error}); fix the file as musubi-tuner would need") from None
    raise LayoutError(path, "musubi-tuner reads a dataset config only from a .toml or .json file; rename it")


def _check(path: str, where: str, value: Any, kind: Any) -> Any:
    """``value`` validated as voluptuous validates it (``isinstance``; bool passes for int)."""
    if kind == _PAIR:
        if isinstance(value, int):
            return (value, value)
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            return (value[0], value[1])
        raise LayoutError(path, f"{where} = {value!r} is not a whole number or [W, H]; write e.g. 512 or [960, 544]")
    if isinstance(kind, list):
        if isinstance(value, list) and all(isinstance(v, kind[0]) for v in value):
            return tuple(value)
        raise LayoutError(path, f"{where} = {value!r} is not a list of whole numbers; write e.g. [1, 25, 45]")
    if not isinstance(value, kind):
        hint = " (musubi-tuner wants a float: write 30.0, not 30)" if kind is float else ""
        raise LayoutError(path, f"{where} = {value!r} is not a {kind.__name__}{hint}; fix it in the config")
    return value


def _section(path: str, where: str, section: Any, schema: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise LayoutError(path, f"{where} is not a table; musubi-tuner refuses the config")
    section = dict(section)
    for old, new in DEPRECATED.items():  # load_user_config (config_utils.py:394-405)
        if old in section:
            value = section.pop(old)
            section.setdefault(new, value)
    for key in section:
        if key not in schema:
            raise LayoutError(path, f"{where}: musubi-tuner does not allow '{key}' there; remove or move it")
    return {key: _check(path, f"{where}.{key}", value, schema[key]) for key, value in section.items()}


def load_dataset_config(
    path: str, arch: str | None = None, base: str | None = None, cli: Mapping[str, Any] | None = None
) -> list[MusubiDataset]:
    """The datasets of a musubi-tuner dataset config. ``arch``: the short name the caching script runs
    as (checks that clip datasets are allowed); ``cli``: the script's own options of the same names
    (the caching scripts' ``--batch_size``), below ``[general]``; ``base``: where relative paths start."""
    raw = _read(path)
    for key in raw:
        if key not in ("general", "datasets"):
            raise LayoutError(path, f"musubi-tuner does not allow a top-level '{key}'; only [general] and [[datasets]]")
    general = _section(path, "[general]", raw.get("general", {}), ASCENDABLE)
    entries = raw.get("datasets", [])
    if not isinstance(entries, list):
        raise LayoutError(path, "datasets is not a list of tables; write each one as [[datasets]]")
    base = os.path.dirname(os.path.abspath(path)) if base is None else base
    datasets = [_dataset(path, i, entry, general, cli or {}, arch, base) for i, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for dataset, written in zip(datasets, (_written_cache(e) for e in entries), strict=True):
        if written in seen:
            raise LayoutError(
                path,
                f"datasets {seen[written]} and {dataset.index} share the cache directory {written!r} "
                "(musubi-tuner refuses it; a dataset without cache_directory uses its image/video directory); give each its own",
            )
        seen[written] = dataset.index
    return datasets


def _written_cache(entry: Any) -> str:
    """The cache directory as musubi compares it: as written, else the image/video directory as written."""
    for key in ("cache_directory", "image_directory", "video_directory"):
        if isinstance(entry, dict) and entry.get(key) is not None:
            return str(entry[key])
    return ""


def _dataset(
    path: str, index: int, entry: Any, general: dict[str, Any], cli: Mapping[str, Any], arch: str | None, base: str
) -> MusubiDataset:
    where = f"datasets[{index}]"
    is_video = isinstance(entry, dict) and ("video_directory" in entry or "video_jsonl_file" in entry)
    values = _section(path, where, entry, VIDEO_KEYS if is_video else IMAGE_KEYS)
    is_image = "image_directory" in values or "image_jsonl_file" in values
    if not is_image and not is_video:
        raise LayoutError(
            path, f"{where} has no image_directory, image_jsonl_file, video_directory or video_jsonl_file; add one"
        )
    schema = IMAGE_KEYS if is_image else VIDEO_KEYS
    found: dict[str, Any] = {}
    for key in (*DEFAULTS, "cache_directory"):
        if key in values:
            found[key] = values[key]
        elif key in general:
            found[key] = general[key]
        elif cli.get(key) is not None and (key in schema or key in ASCENDABLE):
            found[key] = cli[key]
        else:
            found[key] = DEFAULTS[key]
    for key in _PATHS:
        if found[key] is not None:
            found[key] = os.path.normpath(os.path.join(base, found[key]))
    source = "image_directory" if is_image else "video_directory"
    if found["cache_directory"] is None:
        found["cache_directory"] = found[source]
    if found["cache_directory"] is None:
        raise LayoutError(
            path, f"{where} reads a JSONL file but names no cache_directory; musubi-tuner needs one: add it"
        )
    if found[source] is not None and found["caption_extension"] is None:
        raise LayoutError(
            path, f"{where} has no caption_extension; musubi-tuner reads <stem><caption_extension>: set it"
        )
    common = {
        "index": index,
        "kind": "image" if is_image else "video",
        "cache_directory": found["cache_directory"],
        "resolution": found["resolution"],
        "enable_bucket": bool(found["enable_bucket"]),
        "bucket_no_upscale": bool(found["bucket_no_upscale"] and found["enable_bucket"]),
        "caption_extension": found["caption_extension"],
        "batch_size": found["batch_size"],
        "num_repeats": found["num_repeats"],
        "control_directory": found["control_directory"],
        "fp_latent_window_size": found["fp_latent_window_size"],
    }
    if is_image:
        return MusubiDataset(
            **common,
            image_directory=found["image_directory"],
            image_jsonl_file=found["image_jsonl_file"],
            fp_1f_clean_indices=found["fp_1f_clean_indices"],
            fp_1f_target_index=found["fp_1f_target_index"],
            fp_1f_no_post=found["fp_1f_no_post"],
            multiple_target=found["multiple_target"],
            no_resize_control=found["no_resize_control"],
            control_resolution=found["control_resolution"],
        )
    if arch is not None and arch_of(arch).target_fps is None:  # VideoDataset.__init__ raises (ivd:641-642)
        raise LayoutError(
            path, f"{where} is a video dataset, which musubi-tuner's {arch} cannot use; remove it or use images"
        )
    extraction, targets = found["frame_extraction"], round_target_frames(found["target_frames"])
    if extraction not in EXTRACTIONS:
        raise LayoutError(
            path, f"{where}: frame_extraction {extraction!r} is not one of {', '.join(EXTRACTIONS)}; fix it"
        )
    if not targets and extraction != "full":
        raise LayoutError(path, f"{where}: target_frames is empty; musubi-tuner needs at least one frame count")
    if extraction == "uniform" and found["frame_sample"] == 1:
        extraction = "head"
    return MusubiDataset(
        **common,
        video_directory=found["video_directory"],
        video_jsonl_file=found["video_jsonl_file"],
        target_frames=targets,
        frame_extraction=extraction,
        frame_stride=found["frame_stride"],
        frame_sample=found["frame_sample"],
        max_frames=found["max_frames"],
        source_fps=found["source_fps"],
    )
