"""Each trainer's sampling settings, read from the configuration its layout already loaded.

- SimpleTuner (``config.json`` beside ``multidatabackend.json``): ``train_batch_size`` (a
  dataset's own ``train_batch_size`` wins, ``data_backend/factory.py``), ``num_processes``
  (``cli/jobs.py`` reads it from the same file; else the ``num_processes`` of the
  ``accelerate_config`` file it names, read with ``_hazards.accelerate_counts``), ``gradient_accumulation_steps``,
  ``max_train_steps`` and ``allow_dataset_oversubscription`` (they decide the padding),
  ``disable_bucket_pruning``; per dataset ``repeats`` and ``minimum_image_size``; the buckets
  themselves from the dataset's ``aspect_ratio_bucket_indices_<id>.json`` (aspect ratio ->
  images), the index SimpleTuner's sampler reads. Keys may be
  written with or without the leading ``--``, as SimpleTuner accepts both.
- kohya (the dataset TOML): ``batch_size`` per ``[[datasets]]`` (or ``[general]``) and
  ``num_repeats`` per subset; the world size is the launcher's, never in the TOML.
- OneTrainer: the buckets from the cache's own index (each image group's ``aggregate.pt``
  lists every item's ``crop_resolution``, the key ``AspectBatchSorting`` buckets by), and
  ``batch_size`` and the GPU count from the training config that names the cache
  (``layouts/_onetrainer_config.py``). All concepts are one dataset: mgds buckets them together.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from cachedoctor.layouts.samplers.interface import Sampling

if TYPE_CHECKING:
    from cachedoctor.layouts._kohya_config import KohyaConfig
    from cachedoctor.layouts._simpletuner_config import Backend

_SIMPLETUNER_OPTIONS = (
    "gradient_accumulation_steps",
    "max_train_steps",
    "allow_dataset_oversubscription",
    "disable_bucket_pruning",
)


def _get(raw: dict[str, Any], name: str) -> Any:
    for key in (name, f"--{name}"):
        if raw.get(key) not in (None, ""):
            return raw[key]
    return None


def _int(value: Any) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _flag(value: Any) -> bool:
    return value in (True, 1) or str(value).lower() in ("true", "1", "yes")


def simpletuner(backend: Backend, trainer: dict[str, Any], processes: int | None = None) -> Sampling | None:
    """One image dataset's sampling; ``None`` when it has no VAE cache (nothing to count).
    ``processes``: the run's process count as the layout found it (``config.json``, else the
    ``accelerate_config`` it names); without it, ``config.json``'s ``num_processes``."""
    if backend.cache_dir_vae is None:
        return None
    options: dict[str, Any] = {}
    for name in _SIMPLETUNER_OPTIONS:
        value = _get(trainer, name)
        if value is not None:
            options[name] = _flag(value) if name.startswith(("allow", "disable")) else _int(value)
    if backend.raw.get("minimum_image_size") is not None:
        options["minimum_image_size"] = backend.raw["minimum_image_size"]
    suffix = str(backend.raw.get("cache_file_suffix") or backend.id)
    index = None
    if backend.instance_data_dir is not None:
        index = bucket_index(os.path.join(backend.instance_data_dir, f"aspect_ratio_bucket_indices_{suffix}.json"))
    return Sampling(
        backend.id,
        "simpletuner",
        (os.path.normpath(backend.cache_dir_vae),),
        repeats=_int(backend.raw.get("repeats")) or 0,
        batch_size=_int(backend.raw.get("train_batch_size")) or _int(_get(trainer, "train_batch_size")),
        world_size=processes or _int(_get(trainer, "num_processes")),
        options=options,
        counts=index,
    )


def bucket_index(path: str) -> dict[str, int] | None:
    """SimpleTuner's bucket index: aspect ratio -> images, in the order its sampler visits them
    (``load_buckets`` lists the keys of ``aspect_ratio_bucket_indices``). ``None`` if absent
    or unreadable (then the latent sizes stand in for the buckets)."""
    if not os.path.isfile(path):  # a FIFO or a device would block the read
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    buckets = data.get("aspect_ratio_bucket_indices") if isinstance(data, dict) else None
    if not isinstance(buckets, dict):
        return None
    return {str(k): len(v) for k, v in buckets.items() if isinstance(v, list)}


def onetrainer(roots: list[str], crops: dict[str, list[Any]]) -> tuple[Sampling | None, list[str]]:
    """The run's one dataset and notes: ``crops`` holds, per image group, the ``crop_resolution``
    of each item of its first variation (the one the first epoch reads; a group's variations
    share its images). ``None`` when no item has a crop resolution."""
    from cachedoctor.layouts import _onetrainer_config

    counts: dict[str, int] = {}
    for items in crops.values():
        for crop in items:
            if isinstance(crop, (tuple, list)) and len(crop) == 2 and all(type(x) is int for x in crop):
                label = f"{crop[0]}x{crop[1]}"
                counts[label] = counts.get(label, 0) + 1
    if not counts:
        return None, []
    run = _onetrainer_config.find(roots[0]) if roots else None
    notes = []
    if run is not None and run.balancing:
        notes.append(
            f"{run.path}: concept balancing other than one pass ({', '.join(run.balancing[:3])}) is not "
            "modelled; the rank balance counts each cached image once per epoch"
        )
    if run is not None and run.world_size is None:
        notes.append(f"{run.path}: multi_gpu on every visible GPU; pass --world-size to judge the rank balance")
    return Sampling(
        "onetrainer",
        "onetrainer",
        tuple(roots),
        batch_size=run.batch_size if run else None,
        world_size=run.world_size if run else None,
        counts=counts,
    ), notes


def kohya(config: KohyaConfig) -> list[Sampling]:
    """One entry per subset, named after its ``[[datasets]]`` table (the batches are cut per
    dataset; its subsets share the batch size and each has its own ``num_repeats``). Without a
    TOML (``--train_data_dir``), each ``<repeats>_<name>`` folder is a subset listed ``repeats``
    times (``train_util.py`` ``DreamBoothDataset``: the number before the first ``_``)."""
    if config.inherit:
        return [
            Sampling("kohya", "kohya", (path,), repeats=times, listed_times=times)
            for s in config.subsets
            for path, times in _repeat_folders(s.image_dir)
        ]
    return [
        Sampling(
            f"datasets[{s.dataset}]" if s.dataset else "kohya",
            "kohya",
            (s.image_dir,),
            repeats=s.num_repeats,
            listed_times=s.num_repeats,
            batch_size=s.batch_size,
        )
        for s in config.subsets
    ]


def _repeat_folders(root: str) -> list[tuple[str, int]]:
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError:
        return []
    out = []
    for name in names:
        head, sep, _ = name.partition("_")
        if sep and head.isdigit() and int(head) > 0:
            out.append((os.path.join(root, name), int(head)))
    return out
