"""kohya-ss sd-scripts: caches live next to each image.

Latents are ``<stem>_<W:04d>x<H:04d>_<arch>.npz`` where ``W x H`` is the image's own size (so a
resized image needs a new file), or ``<stem>.npz`` from older versions. Text-encoder outputs
are ``<stem>_te_outputs.npz`` (SDXL) or ``<stem>_<arch>_te.npz``; when a folder holds any, every
image in it needs one. ``latents_<h>x<w>`` keys are checked against their shapes by
``shape-mismatch`` without the dataset; here the dataset adds missing, orphan, stale and
collision findings. Each entry's recorded ``original_size`` must equal the image's size from its
header (which only an old-style name can get wrong: a new-style name carries the size). When a
``<stem>.npz`` exists, sd-scripts uses it whatever else is there, and so does this layout.

With sd-scripts' dataset TOML (``--kohya-config``) or its bucket options (``--resolution``,
``--enable-bucket``, ...) each image's bucket is computed as sd-scripts' BucketManager computes
it (``_kohya_buckets.py``), and every latent entry is expected at that size (``latent_hw``):
a plain ``latents`` of another bucket is a shape-mismatch, and a missing or unreadable entry can
be made again. Without them the bucket is known only from inside the entry itself.

Keys (sd-scripts' strategies): SD and SDXL (``_sd.npz``, ``_sdxl.npz``, old ``<stem>.npz``) keep
plain ``latents``, ``original_size``, ``crop_ltrb`` (and ``latents_flipped``, ``alpha_mask``);
SD3, Flux, Lumina, Anima and HunyuanImage add the latent size (``latents_<h>x<w>``, ...), so one
file can hold several buckets. Latents are the VAE's raw output for SD, SDXL, SD3 and
HunyuanImage, and ``scale * (z - shift)`` for Flux and Lumina (their ``AutoEncoder.encode``);
Anima's are normalised per channel, which this repair does not make.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import TYPE_CHECKING

from cachedoctor.layouts import _recompute
from cachedoctor.layouts._images import SOURCE_SUFFIXES, image_size, is_image, stem, walk_images
from cachedoctor.layouts._listing import any_ending, any_image
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
    from cachedoctor.formats.interface import FileMeta
    from cachedoctor.layouts import _kohya_config

_LATENT_NAME = re.compile(r"^(?P<stem>.+)_(?P<w>\d{4,})x(?P<h>\d{4,})_(?P<arch>[a-z0-9]+)\.npz$")
_TE_NAME = re.compile(r"^(?P<stem>.+?)(?P<suffix>_te_outputs|_[a-z0-9]+_te)\.npz$")
_BUCKET_KEY = re.compile(r"^latents_(\d+)x(\d+)$")
_CAPTION_SUFFIXES = (".txt", ".caption")
_DETECT_FOLDERS = 200
#: arch suffix -> whether sd-scripts writes latents_<h>x<w> (its strategies' multi_resolution)
_MULTI_RESOLUTION = {"sd": False, "sdxl": False, "sd3": True, "flux": True, "lumina": True, "anima": True, "hi": True}
#: arch suffixes whose cached latents are ``scale * (z - shift)`` (the AutoEncoder's own encode)
_SCALED = frozenset({"flux", "lumina"})
#: latent stride per arch (sd-scripts' is_disk_cached_latents_expected); 8 where not named
_STRIDE = {"hi": 32}
_NO_RECOMPUTE = {
    "anima": "sd-scripts stores Anima latents normalised per channel by the Qwen-Image VAE's latents_mean/std, "
    "which this repair does not make; let sd-scripts re-cache it",
    "hi": "sd-scripts encodes HunyuanImage latents at 32x with its own VAE, which this repair does not run; "
    "let sd-scripts re-cache it",
}
TEXT_BLOCKED = (
    "sd-scripts caches several text encoders' outputs in one file (SDXL: hidden_state1 from CLIP-L's "
    "11th layer, hidden_state2 and pool2 from CLIP-G; Flux: l_pooled from CLIP-L with t5_out, txt_ids and "
    "t5_attn_mask from T5), which cachedoctor's one-encoder text adapter cannot make; "
    "let sd-scripts re-cache it (cache_text_encoder_outputs.py)"
)
NO_BUCKET = (
    "kohya records an entry's bucket only inside the entry; with the file unreadable or missing, "
    "pass sd-scripts' dataset config (--kohya-config dataset.toml) or its bucket options (--resolution ...) "
    "so the bucket can be computed, or let sd-scripts re-cache it"
)


class KohyaLayout(Layout):
    name = "kohya"
    summary = "kohya-ss sd-scripts: <stem>_<W>x<H>_<arch>.npz and <stem>_te_outputs.npz next to each image"

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        if not any_ending(names, ".npz") or not any_image(names):
            return None
        stems = {stem(n) for n in names if is_image(n)}
        if not stems:
            return None
        for name in sorted(n for n in names if n.endswith(".npz")):  # the first by name: same line on every copy
            m = _LATENT_NAME.match(name) or _TE_NAME.match(name)
            if m is not None and m.group("stem") in stems:
                return Claim(folder, os.path.join(folder, name), "sits next to its image")
        return None

    def resembles(self, names: set[str]) -> bool:
        return any_ending(names, ".npz") and any(
            n.endswith(".npz") and (_LATENT_NAME.match(n) or _TE_NAME.match(n)) for n in names
        )

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        # (here: a scan that --layout auto gives no kohya folder imports neither, nor the buckets)
        from cachedoctor.layouts import _kohya_config
        from cachedoctor.layouts.samplers import from_config as samplers_from_config

        args = dict(options.kohya_args)
        config = _kohya_config.load(options.kohya_config, args) if options.kohya_config else None
        folders = [os.path.abspath(t) for t in targets]
        if not folders and config is not None:
            folders = _outermost([s.image_dir for s in config.subsets])
        for folder in folders:
            if not os.path.isdir(folder):
                raise LayoutError(
                    folder, "no such image folder; kohya caches live next to the images, so scan the image folder"
                )
        plan = DatasetPlan("kohya", folders, entry_suffixes=(".npz",), source_suffixes=SOURCE_SUFFIXES)
        if config is None and args.get("resolution") is not None:
            config = _kohya_config.from_args(folders, args)
        elif config is None and args:
            plan.notes.append("sd-scripts' bucket options need --resolution (or --kohya-config); buckets not computed")
        arch = options.model_family or _detect_arch(folders)
        if arch is None:
            plan.notes.append(
                "no <stem>_<W>x<H>_<arch>.npz latents found; expecting '_sdxl' (pass --model-family to say)"
            )
            arch = "sdxl"
        if config is not None:
            plan.sampling.extend(samplers_from_config.kohya(config))
            plan.skipped.extend(config.skipped)
            if not config.subsets and not config.skipped:
                raise LayoutError(
                    str(options.kohya_config),
                    "names no image folder ([[datasets]] with [[datasets.subsets]] image_dir = ...): nothing to check",
                )
        unreadable = 0
        for root in folders:
            for folder, images, names in walk_images(root):
                subset = _subset_for(config, folder, root)
                te_suffix = _te_suffix(names, arch)
                for image in images:
                    size = image_size(image.path)
                    if size is None:
                        unreadable += 1
                        continue
                    plan.items += 1
                    _expect_image(plan, folder, image, size, names, arch, te_suffix, subset)
        if unreadable:
            plan.notes.append(f"{unreadable} image(s) could not be opened and were not compared")
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        if expected.role == "text":
            return None, TEXT_BLOCKED
        arch = _arch_of(path)
        if arch in _NO_RECOMPUTE:
            return None, _NO_RECOMPUTE[arch]
        hints = dict(expected.hints)
        own = _recompute.own_meta(path) if os.path.exists(path) else None
        seen = [t.key for t in own.tensors] if own else list(_recompute.keys_of(template))
        # the keys on disk win over the arch's default (a file another sd-scripts version wrote)
        if "latents" in seen:
            multi = False
        elif any(_BUCKET_KEY.match(k) for k in seen):
            multi = True
        else:
            multi = _MULTI_RESOLUTION.get(arch, True)
        hw = expected.latent_hw
        if hw is None:
            hw, why = _hw_from_entry(own)
            if hw is None:
                return None, why
        suffix = f"_{hw[0]}x{hw[1]}" if multi else ""
        key = "latents" + suffix
        keys = _recompute.keys_of(template)
        if not keys:
            keys = (key, "original_size" + suffix, "crop_ltrb" + suffix)
            if hints.get("flip_aug"):
                keys += ("latents_flipped" + suffix,)
            if hints.get("alpha_mask"):
                keys += ("alpha_mask" + suffix,)
        elif not multi and "latents" not in keys:
            return None, f"its healthy peers hold no 'latents' key ({', '.join(keys)}); let sd-scripts re-cache it"
        elif multi and not any(_BUCKET_KEY.match(k) for k in keys):
            return (
                None,
                f"its healthy peers hold no 'latents_<h>x<w>' key ({', '.join(keys)}); let sd-scripts re-cache it",
            )
        if hints.get("flip_aug") and not any(k.startswith("latents_flipped") for k in keys):
            keys += ("latents_flipped" + suffix,)  # sd-scripts treats an entry without it as not cached
        resize = hints.get("resized")
        return RecomputeSpec(
            "latent",
            expected.source,
            "kohya-npz",
            "npz",
            key,
            "float32",
            arch in _SCALED,
            hw,
            resize=tuple(resize) if resize else None,
            keys=keys,
            flipped=any(k.startswith("latents_flipped") for k in keys),
            template=template.path if template else None,
            prepare="kohya",
            interpolation=hints.get("interpolation"),
            posterior="sample",  # latent_dist.sample() (../shared/formats.md, checked at 48d368f)
        ), None


def _expect_image(
    plan: DatasetPlan,
    folder: str,
    image: os.DirEntry,
    size: tuple[int, int],
    names: set[str],
    arch: str,
    te_suffix: str | None,
    subset: _kohya_config.KohyaSubset | None,
) -> None:
    w, h = size
    name_stem = stem(image.name)
    mtime = image.stat().st_mtime_ns
    current = f"{name_stem}_{w:04d}x{h:04d}_{arch}.npz"
    legacy = f"{name_stem}.npz"
    # sd-scripts uses an old-style <stem>.npz whenever one exists (SD and SDXL only)
    path = os.path.join(folder, legacy if legacy in names and arch in ("sd", "sdxl") else current)
    hw = None
    hints: tuple = ()
    if subset is not None and w > 0 and h > 0:
        from cachedoctor.layouts._kohya_buckets import latent_hw  # (a subset's config imported it)

        bucket, resized = subset.bucketer().select(w, h)
        hw = latent_hw(bucket, _STRIDE.get(arch, 8))
        hints = (
            ("bucket", bucket),
            ("resized", resized),
            ("flip_aug", subset.flip_aug),
            ("alpha_mask", subset.alpha_mask),
            ("interpolation", subset.resize_interpolation),
        )
    # SD/SDXL keep one plain "latents" (the flipped latent beside it must not stand in for it);
    # the multi-resolution archs name the size in the key: their largest latent is compared
    key = "latents" if hw is not None and not _MULTI_RESOLUTION.get(arch, True) else None
    hints += (("scaling", "vae" if arch in _SCALED else "raw"),)  # Flux/Lumina: the AutoEncoder's own encode
    plan.add(Expected(path, image.path, "latent", mtime, latent_hw=hw, latent_key=key, image_size=size, hints=hints))
    if te_suffix is not None:
        captions = ((subset.caption_extension,) if subset is not None else ()) + _CAPTION_SUFFIXES
        caption = next((os.path.join(folder, name_stem + s) for s in captions if name_stem + s in names), None)
        caption_mtime = os.stat(caption).st_mtime_ns if caption else None
        plan.add(Expected(os.path.join(folder, name_stem + te_suffix), caption or image.path, "text", caption_mtime))


def _subset_for(config: _kohya_config.KohyaConfig | None, folder: str, root: str) -> _kohya_config.KohyaSubset | None:
    """The dataset settings for images in ``folder``: its subset's, else (command-line options
    only) the root's."""
    if config is None:
        return None
    found = config.for_folder(folder)
    return config.for_folder(root) if found is None and config.inherit else found


def _outermost(folders: list[str]) -> list[str]:
    """The folders, each once, without those inside another (walked from their parent)."""
    out: list[str] = []
    for folder in sorted({os.path.normpath(f) for f in folders}):
        if not any(folder == o or folder.startswith(o.rstrip(os.sep) + os.sep) for o in out):
            out.append(folder)
    return out


def _arch_of(path: str) -> str:
    """The arch suffix of a latent file's name; ``sdxl`` for an old-style ``<stem>.npz``."""
    m = _LATENT_NAME.match(os.path.basename(path))
    return m.group("arch") if m else "sdxl"


def _hw_from_entry(own: FileMeta | None) -> tuple[tuple[int, int] | None, str | None]:
    """The latent size the broken entry itself records (its key's suffix or its shape)."""
    key = next((t.key for t in own.tensors if _BUCKET_KEY.match(t.key) or t.key == "latents"), None) if own else None
    if own is None or key is None:
        return None, NO_BUCKET
    match = _BUCKET_KEY.match(key)
    if match:
        return (int(match.group(1)), int(match.group(2))), None
    shape = next(t.shape for t in own.tensors if t.key == key)
    if len(shape) < 2:
        return None, f"its '{key}' has shape {list(shape)}, which names no latent size; {NO_BUCKET}"
    return (shape[-2], shape[-1]), None


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
