"""SimpleTuner: VAE latents named after the image's stem, text embeds after the caption's hash.

- VAE: ``cache_dir_vae/<image folder relative to instance_data_dir>/<sha256(stem)>.pt``, or the
  pre-2024 ``<stem>.pt``; a bare tensor whose last two sizes are the bucket's ``target_size``
  (``[W, H]`` in ``aspect_ratio_bucket_metadata_<id>.json``) divided by 8.
- Text: ``cache_dir/<md5(caption)>-<model_family>.pt``, one per caption; captions come from
  ``<stem>.txt`` (one per non-empty line when the file has several) or from the file name
  (``_`` becomes a space). The null caption ``""`` is always cached for caption dropout, and
  validation prompts land there too: neither is an orphan.

A recompute writes the latent already scaled (``(latent - shift) * factor``), at the bucket's
``target_size`` after the recorded resize and crop, as a bare tensor (or under ``latents`` when
the peers are dicts), bfloat16 unless the peers say otherwise.

Facts checked against SimpleTuner's code: ``fixtures/datasets/FACTS.md``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cachedoctor.layouts import _recompute
from cachedoctor.layouts._images import SOURCE_SUFFIXES, names_in, stem, walk_images
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
    from cachedoctor.layouts import _simpletuner_config as config

CONFIG_NAMES = ("multidatabackend.json", os.path.join("config", "multidatabackend.json"))
_CAPTION_LIMIT = 1 << 20  # a caption file larger than this is not a caption
_ONE_ENCODER = "the transformers-text adapter runs one text encoder, so it cannot make them"
#: model family -> why its text embeds are not recomputed (SimpleTuner ``models/<family>/model.py``).
MULTI_ENCODER_EMBEDS = {
    "sdxl": "SimpleTuner's SDXL text embed joins the penultimate hidden states of both CLIP encoders "
    f"and the second one's pooled output; {_ONE_ENCODER}",
    "flux": "SimpleTuner's Flux text embed holds T5 hidden states, their mask, time ids and CLIP's pooled "
    f"output; {_ONE_ENCODER}",
    "sd3": "SimpleTuner's SD3 text embed joins two CLIP encoders and T5; " + _ONE_ENCODER,
}


class SimpleTunerLayout(Layout):
    name = "simpletuner"
    summary = (
        "SimpleTuner: <sha256(stem)>.pt latents and <md5(caption)>-<family>.pt text embeds, from multidatabackend.json"
    )
    plans_below = False  # its plan reads the config in the folder it is given

    def __init__(self) -> None:
        # cache folder -> (dtype, container) SimpleTuner writes there (from config.json), for recompute_spec
        self._defaults: dict[str, tuple[str, str]] = {}

    def detect(self, targets: list[str], options: LayoutOptions) -> str | None:
        if options.config:
            return f"--config {options.config}"
        found = find_config(targets)
        return f"{found} describes the datasets" if found else None

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        for name in CONFIG_NAMES:
            if name.split(os.sep)[0] in names and os.path.isfile(os.path.join(folder, name)):
                return Claim(folder, os.path.join(folder, name), "describes the datasets")
        return None

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        # (here: a scan that --layout auto gives no SimpleTuner folder imports none of these)
        from cachedoctor.layouts import _simpletuner_aws as aws
        from cachedoctor.layouts import _simpletuner_config as config
        from cachedoctor.layouts._simpletuner_hazards import hazards, most_common, run_size, text_families
        from cachedoctor.layouts._simpletuner_names import embed_path
        from cachedoctor.layouts.samplers import from_config as samplers_from_config

        if not options.config:
            found = find_config(targets)
            if found is None:
                raise LayoutError(
                    targets[0] if targets else ".", "the simpletuner layout needs --config multidatabackend.json"
                )
            options = replace(options, config=found)
        cfg = config.load(options)
        plan = DatasetPlan("simpletuner", [], source_suffixes=SOURCE_SUFFIXES, entry_suffixes=(".pt",))
        plan.skipped.extend(cfg.skipped)
        plan.notes.extend(cfg.notes)
        texts = {b.id: b for b in cfg.backends if b.dataset_type == "text_embeds"}
        default_text = next((b for b in texts.values() if b.raw.get("default")), None)
        if default_text is None and len(texts) == 1:
            default_text = next(iter(texts.values()))
        # the suffix on the files wins over config.json: it is what the trainer wrote
        families = text_families(
            t for t in texts.values() if t.kind == "local"
        )  # listed once: the family guess and the hazards
        family = options.model_family or most_common(families) or cfg.model_family
        if texts and family is None:
            plan.notes.append("model family unknown, so text embeds were not compared; pass --model-family")
        trainer = config._trainer_config(cfg.path)  # train_batch_size, num_processes (rank-imbalance)
        processes, _ = run_size(trainer, cfg.base)  # config.json's, else its accelerate config's
        for backend in cfg.backends:
            if backend.dataset_type != "image":
                continue
            if backend.kind == "local":  # an aws dataset's sampling and hazards: not modelled yet
                plan.sampling.extend(s for s in (samplers_from_config.simpletuner(backend, trainer, processes),) if s)
            if backend.cache_dir_vae and backend.kind == "local":
                container = "torch-gzip" if cfg.compressed else "torch-zip"
                self._defaults[os.path.normpath(backend.cache_dir_vae)] = (cfg.latent_dtype, container)
            text = texts.get(backend.text_embeds) if backend.text_embeds else default_text
            if backend.text_embeds and text is None:
                plan.notes.append(
                    f"dataset {backend.id!r} links text_embeds {backend.text_embeds!r}, which is not "
                    "a text_embeds dataset cachedoctor can read; its captions were not compared"
                )
            text_dir = aws.text_home(text) if text and family else None
            if backend.kind == "aws":
                output_dir = options.output_dir or config._option(trainer, "output_dir")
                aws.expect_aws_backend(plan, backend, text_dir, family, output_dir)
            else:
                _expect_backend(plan, backend, text_dir, family)
        for text in texts.values():
            home = aws.text_home(text)
            if home and family:
                _add_root(plan, home)
                if text is not None and text.kind == "aws":
                    plan.remote_settings[home] = aws.settings_for(text)
                for caption in ["", *cfg.validation_prompts]:
                    plan.extra.add(embed_path(home, caption, family))
        for link in cfg.remote_links:  # a remote dataset's captions share this cache: we cannot list them
            text = texts.get(link) if link else default_text
            home = aws.text_home(text) if text is not None else None
            if home and home not in plan.no_orphans:
                plan.no_orphans.add(home)
                plan.notes.append(
                    f"a remote dataset also uses the text-embed cache {home}, so orphans there were not reported"
                )
        local = [b for b in cfg.backends if b.kind == "local"]  # the hazards read local folders
        plan.hazards.extend(hazards(replace(cfg, backends=local) if len(local) < len(cfg.backends) else cfg, families))
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        if expected.role == "text":
            family = os.path.basename(path)[:-3].rpartition("-")[2]
            if family in MULTI_ENCODER_EMBEDS:
                return None, MULTI_ENCODER_EMBEDS[family]
            return _recompute.text_spec(expected, template, path)
        hw = _recompute.latent_hw_of(expected)
        if hw is None:
            return None, _recompute.NO_SIZE
        bare = template is None or template.meta.container == "tensor"
        default = self._default_of(path)
        key = "" if bare else "latents"
        crop = expected.crop
        return RecomputeSpec(
            "latent",
            expected.source,
            "bare-tensor" if bare else "dict",
            _recompute.format_of(template, path) if template else default[1],
            key,
            _recompute.dtypes_of(template).get(key, default[0]),
            True,
            hw,
            resize=(crop[0], crop[1]) if crop else None,
            crop=(crop[2], crop[3]) if crop else None,
            pre_resize=expected.pre_resize if crop else None,
            keys=_recompute.keys_of(template),
            template=template.path if template else None,
            prepare="simpletuner",
            posterior="sample",  # latent_dist.sample() (../shared/formats.md, checked at bc8e6ab)
        ), None

    def _default_of(self, path: str) -> tuple[str, str]:
        """With no healthy peer to copy: the dtype and container ``config.json`` implies
        (``vae_dtype``, ``compress_disk_cache``); bfloat16 in a torch zip by default."""
        folder = os.path.dirname(os.path.normpath(path))
        while folder not in self._defaults:
            parent = os.path.dirname(folder)
            if parent == folder:
                return "bfloat16", "torch-zip"
            folder = parent
        return self._defaults[folder]


def find_config(targets: list[str]) -> str | None:
    for target in targets:
        for name in CONFIG_NAMES:
            candidate = os.path.join(target, name)
            if os.path.isfile(candidate):
                return candidate
    return None


def _expect_backend(plan: DatasetPlan, backend: config.Backend, text_dir: str | None, family: str | None) -> None:
    from cachedoctor.layouts._simpletuner_buckets import bucket_sizes
    from cachedoctor.layouts._simpletuner_names import embed_path, latent_name

    data = backend.instance_data_dir
    if data is None or not os.path.isdir(data):
        raise LayoutError(
            data or backend.id,
            f"dataset {backend.id!r}: instance_data_dir does not exist; "
            "fix the path in the config or mount the dataset",
        )
    vae = backend.cache_dir_vae
    if vae is None:
        plan.notes.append(f"dataset {backend.id!r} has no cache_dir_vae; its latents were not compared")
    else:
        _add_root(plan, vae)
    suffix = str(backend.raw.get("cache_file_suffix") or backend.id)
    buckets = bucket_sizes(os.path.join(data, f"aspect_ratio_bucket_metadata_{suffix}.json"), data, plan)
    strategy = str(backend.raw.get("caption_strategy") or "filename")
    if text_dir and strategy not in ("textfile", "filename", "instanceprompt"):
        plan.notes.append(f"dataset {backend.id!r}: caption_strategy {strategy!r} is not compared")
    prefix = backend.raw.get("instance_prompt") if backend.raw.get("prepend_instance_prompt") else None
    no_caption = 0
    for folder, images, names in walk_images(data):
        rel = os.path.relpath(folder, data)
        cache_folder = vae if rel == "." or vae is None else os.path.join(vae, rel)
        cache_names = names_in(cache_folder) if cache_folder else set()
        for image in images:
            plan.items += 1
            image_stem = stem(image.name)
            if cache_folder is not None:
                legacy = image_stem + ".pt"
                name = latent_name(image_stem)
                if legacy in cache_names and name not in cache_names:
                    name = legacy
                rel_image = image.name if rel == "." else os.path.join(rel, image.name)
                hw, crop, pre_resize = buckets.get(rel_image, (None, None, None))
                plan.add(
                    Expected(
                        os.path.join(cache_folder, name),
                        image.path,
                        "latent",
                        image.stat().st_mtime_ns,
                        latent_hw=hw,
                        crop=crop,
                        pre_resize=pre_resize,
                        hints=(("scaling", "vae"),),  # (z - shift) * factor, SimpleTuner's VAE cache
                    ),
                    cache_folder,
                )
            if text_dir is None or family is None:
                continue
            captions, source, source_mtime = _captions(strategy, folder, image_stem, image.path, names, backend.raw)
            if captions is None:
                no_caption += 1
                continue
            for caption in captions:
                if prefix:
                    caption = f"{prefix} {caption}"
                plan.add(
                    Expected(
                        embed_path(text_dir, caption, family), source, "text", source_mtime, shared=True, text=caption
                    ),
                    text_dir,
                )
    if no_caption:
        plan.notes.append(
            f"dataset {backend.id!r}: {no_caption} image(s) have no caption file; their text embeds were not compared"
        )


def _captions(
    strategy: str, folder: str, image_stem: str, image: str, names: set[str], raw: dict[str, Any]
) -> tuple[list[str] | None, str, int | None]:
    """The captions SimpleTuner derives for an image, the file they come from and its mtime
    (``None`` when the caption is not in a file of its own)."""
    if strategy == "textfile":
        txt = image_stem + ".txt"
        if txt not in names:
            return None, image, None
        path = os.path.join(folder, txt)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the plan
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(f"{path}: not a regular file")
                mtime = st.st_mtime_ns
                text = os.read(fd, _CAPTION_LIMIT).decode("utf-8")
            finally:
                os.close(fd)
        except (OSError, UnicodeDecodeError):
            return None, path, None
        return ([line for line in text.split("\n") if line] if "\n" in text else [text]), path, mtime
    if strategy == "filename":
        return [image_stem.replace("_", " ")], image, None
    if strategy == "instanceprompt" and isinstance(raw.get("instance_prompt"), str):
        return [raw["instance_prompt"]], image, None
    return None, image, None


def _add_root(plan: DatasetPlan, folder: str) -> None:
    if folder in plan.roots:
        return
    if folder.startswith("s3://") or os.path.isdir(folder):  # a prefix in a bucket: the scan lists it
        plan.roots.append(folder)
    else:
        plan.notes.append(f"cache folder {folder} does not exist: every entry expected there is missing")
