"""kohya-ss sd-scripts' dataset configuration: the ``--dataset_config`` TOML and the training
script's bucket options, resolved as sd-scripts' ``library/config_util.py`` does (commit 48d368f).

A TOML has ``[general]``, ``[[datasets]]`` and ``[[datasets.subsets]]``. A subset's setting is
looked up in the subset, then its dataset, then ``[general]``, then the command line's options,
then sd-scripts' defaults; a dataset's (resolution and bucket settings) in the dataset,
``[general]``, the command line, the defaults. ``resolution`` is one number or ``[W, H]``.

A relative ``image_dir`` is taken from the TOML's folder (sd-scripts takes it from the folder it
runs in; an absolute path means the same to both). Subsets that list their images in a
``metadata_file`` (fine-tuning datasets) are not read here: they are reported as skipped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cachedoctor import toml
from cachedoctor.layouts._kohya_buckets import Bucketer, BucketRules
from cachedoctor.layouts.interface import LayoutError

#: sd-scripts' defaults (DreamBooth dataset and subset parameters in config_util.py).
DATASET_DEFAULTS: dict[str, Any] = {
    "resolution": None,
    "enable_bucket": False,
    "min_bucket_reso": 256,
    "max_bucket_reso": 1024,
    "bucket_reso_steps": 64,
    "bucket_no_upscale": False,
}
SUBSET_DEFAULTS: dict[str, Any] = {
    "flip_aug": False,
    "alpha_mask": False,
    "random_crop": False,
    "caption_extension": ".caption",
    "resize_interpolation": None,
}
_INTERPOLATIONS = ("lanczos", "nearest", "bilinear", "linear", "bicubic", "cubic", "area", "box")


@dataclass(frozen=True)
class KohyaSubset:
    """One image folder and how sd-scripts caches its images."""

    image_dir: str
    rules: BucketRules
    flip_aug: bool = False
    alpha_mask: bool = False
    random_crop: bool = False
    caption_extension: str = ".caption"
    resize_interpolation: str | None = None
    num_repeats: int = 1  # times sd-scripts lists each image per epoch
    batch_size: int | None = None  # the dataset's batch_size (None: the training script's --train_batch_size)
    dataset: int = 0  # which [[datasets]] table (1-based; 0: none, the command line's folders)

    def bucketer(self) -> Bucketer:
        return Bucketer(self.rules)


@dataclass
class KohyaConfig:
    subsets: list[KohyaSubset]
    skipped: list[str]
    inherit: bool = False  # subfolders take their root's settings (command-line options, no TOML)

    def for_folder(self, folder: str) -> KohyaSubset | None:
        """The subset whose image_dir is ``folder`` (the first one, as sd-scripts lists them)."""
        folder = os.path.normpath(folder)
        return next((s for s in self.subsets if os.path.normpath(s.image_dir) == folder), None)


def resolution_of(value: Any, where: str) -> tuple[int, int]:
    """``512``, ``"512"``, ``"512,768"`` or ``[512, 768]`` as ``(W, H)``."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        try:
            value = [int(p) for p in parts] if len(parts) > 1 else int(parts[0])
        except ValueError:
            raise LayoutError(where, f"resolution {value!r} is not a number or 'W,H'") from None
    if isinstance(value, bool):
        raise LayoutError(where, f"resolution {value!r} is not a number or [W, H]")
    if isinstance(value, int):
        return value, value
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return int(value[0]), int(value[1])
    raise LayoutError(where, f"resolution {value!r} is not a number or [W, H]")


def _pick(key: str, chain: Sequence[Mapping[str, Any]], default: Any) -> Any:
    for level in chain:
        value = level.get(key)
        if value is not None:
            return value
    return default


def _rules(chain: Sequence[Mapping[str, Any]], where: str) -> BucketRules:
    raw = _pick("resolution", chain, None)
    if raw is None:
        raise LayoutError(where, "no resolution: sd-scripts needs one (in the dataset, [general] or --resolution)")
    values = {k: _pick(k, chain, d) for k, d in DATASET_DEFAULTS.items() if k != "resolution"}
    for key in ("min_bucket_reso", "max_bucket_reso", "bucket_reso_steps"):
        if not isinstance(values[key], int) or isinstance(values[key], bool):
            raise LayoutError(where, f"{key} {values[key]!r} is not a whole number")
    for key in ("enable_bucket", "bucket_no_upscale"):
        if not isinstance(values[key], bool):
            raise LayoutError(where, f"{key} {values[key]!r} is not true or false")
    rules = BucketRules(resolution_of(raw, where), **values)
    problem = rules.problem()
    if problem is not None:
        raise LayoutError(where, problem + " (sd-scripts refuses this dataset)")
    return rules


def _subset(
    subset: Mapping[str, Any], chain: Sequence[Mapping[str, Any]], rules: BucketRules, folder: str, where: str
) -> KohyaSubset:
    image_dir = subset.get("image_dir")
    if not isinstance(image_dir, str) or not image_dir:
        raise LayoutError(where, "a subset has no image_dir")
    path = os.path.normpath(os.path.join(folder, os.path.expanduser(image_dir)))
    if not os.path.isdir(path):
        raise LayoutError(path, f"image_dir of {where} is not a folder")
    full = [subset, *chain]
    values = {k: _pick(k, full, d) for k, d in SUBSET_DEFAULTS.items()}
    interpolation = values["resize_interpolation"]
    if interpolation is not None and interpolation not in _INTERPOLATIONS:
        raise LayoutError(where, f"resize_interpolation {interpolation!r} is not one of {', '.join(_INTERPOLATIONS)}")
    return KohyaSubset(path, rules, **values)


def load(path: str | None, args: Mapping[str, Any] | None = None) -> KohyaConfig:
    """The subsets of the TOML at ``path`` (with ``args``, the command line's bucket options, as
    the fallback below ``[general]``); without a TOML, no subsets (see :func:`from_args`).

    Raises :class:`LayoutError` naming the path for a missing or invalid file or folder."""
    cli = dict(args or {})
    if path is None:
        return KohyaConfig([], [])
    path = os.path.abspath(path)
    try:
        with open(path, "rb") as handle:
            data = toml.load(handle)
    except FileNotFoundError:
        raise LayoutError(path, "no such kohya dataset config") from None
    except IsADirectoryError:
        raise LayoutError(path, "is a folder; --kohya-config names sd-scripts' dataset TOML") from None
    except OSError as exc:
        raise LayoutError(path, f"cannot be read ({exc.strerror})") from None
    except (toml.decode_error(), UnicodeDecodeError) as exc:
        raise LayoutError(path, f"not valid TOML ({exc}); fix the file") from None
    except RecursionError:
        raise LayoutError(path, "TOML nested too deeply to read; fix the file") from None
    except ValueError as exc:  # e.g. an integer too long to convert
        raise LayoutError(path, f"not valid TOML ({exc}); fix the file") from None
    general = data.get("general", {})
    datasets = data.get("datasets", [])
    if not isinstance(general, dict) or not isinstance(datasets, list):
        raise LayoutError(path, "[general] must be a table and [[datasets]] an array of tables")
    subsets: list[KohyaSubset] = []
    skipped: list[str] = []
    folder = os.path.dirname(path)
    for n, dataset in enumerate(datasets, 1):
        if not isinstance(dataset, dict):
            raise LayoutError(path, f"datasets[{n}] is not a table")
        where = f"{path} datasets[{n}]"
        items = dataset.get("subsets", [])
        if not isinstance(items, list) or not all(isinstance(s, dict) for s in items):
            raise LayoutError(path, f"datasets[{n}].subsets must be an array of tables")
        if any("metadata_file" in s for s in items):
            skipped.append(f"{where}: fine-tuning subsets (metadata_file) are not read by cachedoctor")
            continue
        if any("conditioning_data_dir" in s for s in items):
            skipped.append(f"{where}: ControlNet subsets are not read by cachedoctor")
            continue
        chain = [dataset, general, cli]
        rules = _rules(chain, path)
        batch = _pick("batch_size", [dataset, general], None)
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            batch = None  # sd-scripts would refuse it; the rank simulation then says it is not known
        for m, subset in enumerate(items, 1):
            made = _subset(subset, chain, rules, folder, f"{where}.subsets[{m}]")
            repeats = _pick("num_repeats", [subset, *chain], 1)
            subsets.append(
                replace(
                    made,
                    num_repeats=repeats
                    if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 0
                    else 1,
                    batch_size=batch,
                    dataset=n,
                )
            )
    return KohyaConfig(subsets, skipped)


def from_args(folders: list[str], args: Mapping[str, Any]) -> KohyaConfig:
    """Every scan folder as one subset under the command line's bucket options (sd-scripts'
    ``--train_data_dir`` use without a TOML)."""
    rules = _rules([dict(args)], "--resolution")
    return KohyaConfig([KohyaSubset(os.path.normpath(f), rules) for f in folders], [], inherit=True)
