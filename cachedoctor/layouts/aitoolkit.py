"""ostris/ai-toolkit: each image folder's ``_latent_cache`` and ``_t_e_cache``, files named after the
settings that made them.

ai-toolkit (27a03a9) names a latent ``<stem>_<hash>.safetensors`` where the hash digests the
entry's *info*: the image's name, its bucket placement (``scale_to_width/height``, ``crop_x/y``,
``crop_width/height``), the latent space, flips; and it writes that info into the file's own
safetensors metadata. A text embedding is ``<stem>_<hash>`` of its caption's info (no metadata).
The rules are re-implemented in ``_aitoolkit_rules`` (names, hashes, buckets),
``_aitoolkit_captions`` and ``_aitoolkit_config`` (the job YAML, model families).

What the trainer does decides what is a finding. At start-up it caches every item whose name
does not exist and trusts every name that does; at training, a file that does not load is
skipped and another image of its bucket trained instead, silently. So:

- a latent whose own metadata does not hash to its name is a file ai-toolkit never looks up
  (``orphan-entry``), as is one whose image is gone, and, with the job config, one of settings
  the config no longer makes (a changed resolution leaves the old files behind);
- its image changed since (its time, or its size no longer giving the recorded placement):
  ``stale-entry``; its latent must have its bucket's size (``shape-mismatch``);
- with the job config, an image without the latent or text embedding its settings name is a
  ``missing-entry`` (ai-toolkit would make it at start-up, at the cost of loading the VAE), and a
  text embedding of another caption an orphan.

Repair recomputes a latent from the placement its own metadata records (or, with the job
config, the one ai-toolkit computes), prepared as ai-toolkit prepares it, encoded, drawn and
scaled as its model family does (``0.18215 * sample``: a posterior sample, for SD 1.5), under ``latent``
with its metadata; text embeddings are refused (ai-toolkit's own text encoders make them).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachedoctor.layouts._images import names_in
from cachedoctor.layouts._safetensors_header import metadata as header_metadata
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
)

if TYPE_CHECKING:
    from cachedoctor.layouts._aitoolkit_rules import AiToolkitDataset

#: ``(rules.LATENT_DIR, rules.TEXT_DIR)``, spelled out: ``--layout auto`` asks for them at every folder, and
#: the rules (hashes, buckets, captions) are imported only once a plan needs them
CACHE_FOLDERS = ("_latent_cache", "_t_e_cache")
NO_INFO = (
    "ai-toolkit records how a latent was made only in its own metadata and its job config; with the file "
    "unreadable and no config, pass the job config (--config job.yaml) so the placement can be computed"
)
TEXT_BLOCKED = (
    "ai-toolkit encodes captions with its model's own text encoders (PromptEmbeds), which this repair does not "
    "run; it re-caches a missing text embedding at start-up"
)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A latent as the plan knows it: the info that names it and the image it is of."""

    info: dict[str, Any]
    image: str | None


class AiToolkitLayout(Layout):
    name = "ai-toolkit"
    summary = "ostris ai-toolkit: _latent_cache/<stem>_<hash>.safetensors and _t_e_cache/ beside each image"
    recaches_missing = True  # encodes every latent and text embedding not on disk (dataloader_mixins.py:1937)

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        for sub in CACHE_FOLDERS:
            found = _first_entry(os.path.join(folder, sub)) if sub in names else None
            if found is not None:
                return Claim(folder, found, "caches the images beside it")
        if os.path.basename(os.path.normpath(folder)) in CACHE_FOLDERS:  # pointed at the cache folder itself
            found = _first_entry(folder)
            if found is not None:
                return Claim(
                    os.path.dirname(os.path.normpath(folder)), found, "is ai-toolkit's cache of the images beside it"
                )
        return None

    def resembles(self, names: set[str]) -> bool:
        return any(sub in names for sub in CACHE_FOLDERS)

    def opaque(self, name: str) -> bool:
        return name in CACHE_FOLDERS  # their parent's claim sees them by name

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        from cachedoctor.layouts import _aitoolkit_rules as rules

        config = (
            options.trainer_config[1] if options.trainer_config and options.trainer_config[0] == self.name else None
        )
        from cachedoctor.layouts._aitoolkit_config import load_job_config

        datasets = load_job_config(config) if config else []
        if config and not datasets:
            raise LayoutError(config, "names no dataset (config.process[].datasets with folder_path): nothing to check")
        folders = sorted({d.folder_path for d in datasets}) if datasets else _image_folders(targets)
        plan = DatasetPlan(
            self.name,
            folders,
            entry_suffixes=(".safetensors",),
            source_suffixes=rules.IMAGE_SUFFIXES + (".txt", ".json"),
        )
        plan.owned = [os.path.join(f, sub) for f in folders for sub in CACHE_FOLDERS]
        if not datasets:
            plan.notes.append(
                "no ai-toolkit job config: each latent is judged by the settings its own metadata records; "
                "pass --config job.yaml to find missing entries and entries of settings it no longer uses"
            )
        for dataset in datasets:
            plan.notes.extend(f"{dataset.folder_path}: {h}" for h in dataset.hazards())
        for folder in folders:
            _expect_folder(plan, folder, [d for d in datasets if d.folder_path == folder])
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        from cachedoctor.layouts import _aitoolkit_rules as rules

        if expected.role == "text":
            return None, TEXT_BLOCKED
        hints = dict(expected.hints)
        info = dict(hints["info"]) if hints.get("info") else rules.info_from_metadata(header_metadata(path) or {})
        from cachedoctor.layouts._aitoolkit_families import FAMILIES

        family = FAMILIES.get(str(hints.get("arch") or _arch_of(info)))
        if info is None:
            return None, NO_INFO
        if family is None:
            return (
                None,
                f"ai-toolkit's latent space {info.get('latent_space_version')!r} is unknown here: its scaling is not known; re-cache it with ai-toolkit",
            )
        if family.recompute_why is not None:
            return None, f"ai-toolkit's {family.arch} latents: {family.recompute_why}"
        if info.get("flip_y") or any(k not in _PLAIN_INFO for k in info):
            return (
                None,
                f"its settings ({', '.join(sorted(k for k in info if k not in _PLAIN_INFO)) or 'flip_y'}) are ones this repair does not prepare; re-cache it with ai-toolkit",
            )
        downscale = family.downscale or 8
        hw = (int(info["crop_height"]) // downscale, int(info["crop_width"]) // downscale)
        dtype = next((t.dtype for t in template.meta.tensors if t.key == "latent"), None) if template else None
        software = _software(path, template)
        return RecomputeSpec(
            "latent",
            expected.source,
            "dict",
            "safetensors",
            "latent",
            dtype or str(hints.get("dtype") or "float32"),
            True,  # scaling * (z - shift), the VAE config's factors (StableDiffusion.encode_images)
            hw,
            resize=(int(info["scale_to_width"]), int(info["scale_to_height"])),
            crop=(int(info["crop_y"]), int(info["crop_x"])),
            keys=("latent",),
            flipped=bool(info.get("flip_x")),
            template=template.path if template else None,
            prepare="aitoolkit",
            metadata=tuple(rules.metadata_for(info, software).items()),
            posterior="mode" if family.posterior == "mean" else family.posterior,
        ), None


#: the info keys an image's latent has when this repair can prepare it as ai-toolkit does
_PLAIN_INFO = frozenset(
    {"filename", "scale_to_width", "scale_to_height", "crop_x", "crop_y", "crop_width", "crop_height"}
    | {"latent_space_version", "latent_version", "flip_x"}
)
#: latent_space_version -> arch (data_loader.py:503-520 names them so)
_SPACES = {"flux1": "flux", "sdxl": "sdxl", "sd3": "sd3"}


def _arch_of(info: dict[str, Any] | None) -> str | None:
    space = info.get("latent_space_version") if info else None
    return _SPACES.get(str(space), str(space)) if space is not None else None


def _software(path: str, template: Template | None) -> dict[str, str]:
    """The ``software`` ai-toolkit recorded (the file's own, else a peer's, else 27a03a9's)."""
    from cachedoctor.layouts import _aitoolkit_rules as rules

    for meta in [header_metadata(path) or {}, *(dict(m) for m in (template.metadata if template else ()))]:
        try:
            found = json.loads(meta.get("software", ""))
        except ValueError:
            continue
        if isinstance(found, dict):
            return {str(k): str(v) for k, v in found.items()}
    return dict(rules.SOFTWARE)


def _first_entry(folder: str) -> str | None:
    """A cache file of ``folder`` named as ai-toolkit names them (the first listed: a cache folder
    may hold a million, and one shows the sign)."""
    from cachedoctor.layouts import _aitoolkit_rules as rules

    try:
        with os.scandir(folder) as it:
            for entry in it:
                if rules.split_name(entry.name):
                    return entry.path
    except OSError:
        return None
    return None


def _image_folders(targets: list[str]) -> list[str]:
    """Without a config: every folder below the targets that holds a ``_latent_cache`` or ``_t_e_cache``."""
    found = []
    for target in targets:
        if os.path.basename(os.path.normpath(target)) in CACHE_FOLDERS and os.path.isdir(target):
            found.append(os.path.dirname(os.path.abspath(target)))  # the cache folder itself: its images are beside it
            continue
        if not os.path.isdir(target):
            raise LayoutError(
                target, "no such image folder; check the path, or pass the ai-toolkit job config (--config)"
            )
        for folder, subdirs, _ in os.walk(target):
            if any(sub in subdirs for sub in CACHE_FOLDERS):
                found.append(folder)
            subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in CACHE_FOLDERS)
    return found


def _images(folder: str) -> dict[str, str]:
    """The folder's images by stem (ai-toolkit lists ``.jpg .jpeg .png .webp``, any case)."""
    from cachedoctor.layouts import _aitoolkit_rules as rules

    return {
        os.path.splitext(n)[0]: os.path.join(folder, n)
        for n in sorted(names_in(folder))
        if n.lower().endswith(rules.IMAGE_SUFFIXES)
    }


def _expect_folder(plan: DatasetPlan, folder: str, datasets: list[AiToolkitDataset]) -> None:
    from cachedoctor.layouts import _aitoolkit_rules as rules

    images = _images(folder)
    plan.items += len(images)
    latent_dir, text_dir = os.path.join(folder, rules.LATENT_DIR), os.path.join(folder, rules.TEXT_DIR)
    wanted: dict[str, _Entry] = {}  # latent path -> what the config makes there
    texts: dict[str, str] = {}  # text path -> its image
    for dataset in datasets:
        for source in images.values():
            wanted.update(_wanted_latents(dataset, source))
            if dataset.cache_text_embeddings:
                texts.update(_wanted_texts(dataset, source))
    for name in sorted(names_in(latent_dir)):
        split = rules.split_name(name)
        if split is None:
            continue
        path = os.path.join(latent_dir, name)
        entry = wanted.pop(path, None)  # with the config: what it makes here, whatever the file's state
        info = entry.info if entry else rules.info_from_metadata(header_metadata(path) or {})
        if info is None or rules.settings_hash(info) != split[1]:
            continue  # a name ai-toolkit never looks up: the scan reports it as an orphan
        image = images.get(split[0])
        if image is None or (datasets and entry is None):
            continue  # its image is gone, or the config makes other settings now: an orphan
        plan.add(_expected(path, image, info, _stale(image, info), datasets))
    for path, missing in sorted(wanted.items()):  # what ai-toolkit would cache at start-up
        if missing.image is not None:
            plan.add(_expected(path, missing.image, missing.info, None, datasets))
    if not datasets:  # which caption a text embedding holds is in its name's hash only: its image must exist
        for name in sorted(names_in(text_dir)):
            split = rules.split_name(name)
            if split is not None and split[0] in images:
                texts[os.path.join(text_dir, name)] = images[split[0]]
    caption_ext = datasets[0].caption_ext if datasets else ".txt"
    for path, image in sorted(texts.items()):
        caption = os.path.splitext(image)[0] + caption_ext
        source = caption if os.path.isfile(caption) else image
        # with the config the caption is in the name's hash (a new caption: a new name), and a blank
        # embedding depends on no file: only without it is a newer caption file the sign of a stale one
        plan.add(Expected(path, source, "text", None if datasets else _mtime(source)), text_dir)


def _expected(
    path: str, image: str, info: dict[str, Any], stale: str | None, datasets: list[AiToolkitDataset]
) -> Expected:

    arch = datasets[0].model.arch if datasets else _arch_of(info)
    from cachedoctor.layouts._aitoolkit_families import FAMILIES

    family = FAMILIES.get(str(arch))
    downscale = family.downscale if family and family.downscale else 8
    dtype = datasets[0].model.latent_dtype if datasets else None
    hw = (int(info["crop_height"]) // downscale, int(info["crop_width"]) // downscale)
    return Expected(
        path,
        image,
        "latent",
        _mtime(image),
        latent_hw=hw,
        latent_key="latent",
        stale_reason=stale,
        hints=(
            ("info", tuple(info.items())),
            ("arch", arch),
            ("dtype", _DTYPE.get(str(dtype))),
            ("scaling", "vae"),  # scaling * (sample - shift), the VAE config's (encode_images)
        ),
    )


#: safetensors dtype names -> torch's (the config's vae_dtype as ai-toolkit writes the latent)
_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _wanted_latents(dataset: AiToolkitDataset, image: str) -> dict[str, _Entry]:
    """The latent files the job config makes for ``image`` (each resolution, flipped twins)."""
    from cachedoctor.layouts import _aitoolkit_rules as rules

    if not (dataset.cache_latents_to_disk and not dataset.is_video) or dataset.random_crop:
        return {}
    try:
        size = rules.image_size(image, exif=not dataset.fast_image_size)
    except OSError:
        return {}
    out = {}
    for where in rules.buckets(size, dataset):
        for flip in (False, True) if dataset.flip_x else (False,):
            info = rules.latent_info(os.path.basename(image), where, dataset, flip_x=flip)
            out[rules.latent_name(image, info)] = _Entry(info, image)
    return out


def _wanted_texts(dataset: AiToolkitDataset, image: str) -> dict[str, str]:
    """The text-embedding files the job config makes for ``image``: its caption, and the blank
    caption when captions are dropped out."""
    from cachedoctor.layouts import _aitoolkit_rules as rules

    space = dataset.model.text_embedding_space_version
    if space is None or dataset.shuffle_tokens or dataset.random_triggers:
        return {}
    captions = [rules.cache_caption(rules.raw_caption(image, dataset), dataset)]
    if dataset.caption_dropout_rate > 0:
        captions.append(rules.dropout_caption(dataset))
    return {rules.text_name(image, rules.text_info(c, space)): image for c in captions}


def _stale(image: str, info: dict[str, Any]) -> str | None:
    """Why the latent no longer fits its image, by content: the image's size no longer gives the
    placement recorded (scale_to from the crop, as ai-toolkit's bucketing computes it)."""
    from cachedoctor.layouts import _aitoolkit_rules as rules

    try:
        w, h = rules.image_size(image)
    except OSError:
        return None
    bw, bh = int(info["crop_width"]), int(info["crop_height"])
    factor = max(bw / w, bh / h)  # the same float steps as setup_buckets (dataloader_mixins.py:216-314)
    now = (math.ceil(w * factor), math.ceil(h * factor))
    was = (int(info["scale_to_width"]), int(info["scale_to_height"]))
    if now != was:
        return f"the image is now {w}x{h}, which its bucket scales to {now[0]}x{now[1]}, not the {was[0]}x{was[1]} recorded"
    return None


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
