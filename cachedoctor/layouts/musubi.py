"""kohya-ss/musubi-tuner: a dataset's latents and text-encoder outputs side by side in one folder.

Every dataset of musubi's dataset config (``--config dataset.toml``: ``[[datasets]]`` with
``image_directory``/``video_directory`` or a JSONL file, ``cache_directory``, ``resolution``,
``enable_bucket``, ``target_frames``, ...) caches into its ``cache_directory`` (its image or video
folder when none is named): ``<stem>_<W>x<H>_<arch>.safetensors`` per image (W x H its own size)
or per clip window (``<stem>_<start>-<frames>_<W>x<H>_<arch>``, W x H the bucket), and
``<stem>_<arch>_te.safetensors`` per image or clip. Keys spell their size and dtype
(``latents_1x12x20_float32``); the files' metadata says ``architecture``, ``width``, ``height``
and, for text, ``caption1``. The rules are musubi's own, re-implemented in ``_musubi_rules``
(names, buckets, windows), ``_musubi_archs`` (what each of its 16 architectures writes) and
``_musubi_config`` (the dataset config), from musubi-tuner 30c658c.

What musubi's training does with the folder (``dataset/image_video_dataset.py``
``prepare_for_training``): it globs ``*_<arch>.safetensors`` and takes every latent whose text
file exists, whatever the dataset holds now, bucketing by the size in its name. So with the
config, each image (with a caption file) expects its latent, at its bucket's size
(``shape-mismatch``), and its text file, whose ``caption1`` must be today's caption
(``stale-entry``); a latent or text file no item maps to is an orphan that training would still
use; each clip expects its text file and, with no window cached at all, a window (missing). A
clip window's latent must have the frames its window compresses to (4x in time, every video
architecture). Without the config, a cache folder is judged by itself: each latent needs its
text file (training skips the item silently otherwise), and images beside the cache (musubi's
default ``cache_directory``) are paired by name; buckets are then unknown.

Repair recomputes Z-Image latents (a 2D ``AutoencoderKL``'s mode, untransformed, float32) into
musubi's container, key and metadata; every other architecture, clip windows and text encoders
are refused with the reason and the musubi script to run (``_musubi_archs``).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachedoctor import keynames
from cachedoctor.layouts import _recompute
from cachedoctor.layouts._images import SOURCE_SUFFIXES, image_size, names_in, stem
from cachedoctor.layouts._listing import any_ending
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
    from cachedoctor.layouts import _musubi_rules as rules
    from cachedoctor.layouts._musubi_config import MusubiDataset

#: musubi's VAEs compress time 4x: a window of n frames is (n - 1) // 4 + 1 latent frames
#: (``VideoDataset.vae_frame_stride``, image_video_dataset.py:621)
FRAME_STRIDE = 4
NO_BUCKET = (
    "musubi-tuner records an entry's bucket only in its key and file name; with the file unreadable or "
    "missing, pass its dataset config (--config dataset.toml) so the bucket can be computed"
)


@dataclass(slots=True)
class _Folder:
    """One cache directory and what the plan knows of the dataset that writes into it."""

    cache: str
    dataset: MusubiDataset | None  # None: judged by itself (no config)
    names: set[str] = field(default_factory=set)


class MusubiLayout(Layout):
    name = "musubi"
    summary = "kohya-ss musubi-tuner: <stem>_<W>x<H>_<arch>.safetensors and <stem>_<arch>_te.safetensors per item"

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        found = _configs_in(folder, names) if any_ending(names, ".toml") else []
        if found:
            return Claim(folder, found[0], "describes the datasets")
        if not any_ending(names, ".safetensors"):
            return None
        files = sorted(n for n in names if n.endswith(".safetensors"))  # (a name not ending so never parses)
        if not files:
            return None  # (nor are the rules imported: a scan of no musubi folder never needs them)
        from cachedoctor.layouts import _musubi_rules as rules

        for name in files:  # the first by name: the same line on every copy
            parsed = rules.parse_cache_name(name)
            if parsed is not None and parsed.arch in rules.ARCHS:
                return Claim(folder, os.path.join(folder, name), "is a musubi-tuner cache file")
        return None

    def resembles(self, names: set[str]) -> bool:
        if not any_ending(names, ".safetensors"):
            return False
        files = [n for n in names if n.endswith(".safetensors")]
        if not files:
            return False
        from cachedoctor.layouts import _musubi_rules as rules

        return any((p := rules.parse_cache_name(n)) is not None and p.arch in rules.ARCHS for n in files)

    def template_kind(self, name: str, role: str) -> str:
        from cachedoctor.layouts import _musubi_rules as rules

        parsed = rules.parse_cache_name(name)
        if parsed is None:
            return super().template_kind(name, role)
        return f"{'text' if parsed.is_te else 'latent'}:{parsed.arch}:{'clip' if parsed.window else 'image'}"

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        from cachedoctor.layouts import _musubi_rules as rules

        config = (
            options.trainer_config[1] if options.trainer_config and options.trainer_config[0] == self.name else None
        )
        configs = [config] if config else [c for t in targets for c in _configs_in(t, names_in(t))]
        # each config's datasets are judged for the architectures its cache folders hold (one run per
        # caching script); without a config, each cache folder for those it holds itself
        groups: list[tuple[str | None, list[_Folder]]] = [(c, _from_config(c)) for c in configs]
        groups = groups or [(None, [f]) for f in _from_targets(targets)]
        plan = DatasetPlan(self.name, sorted({f.cache for _, g in groups for f in g}), entry_suffixes=(".safetensors",))
        plan.source_suffixes = SOURCE_SUFFIXES + rules.VIDEO_EXTENSIONS
        if configs and not config:
            plan.notes.extend(f"musubi-tuner dataset config found: {c}" for c in configs)
        if not configs:
            plan.notes.append(
                "no musubi-tuner dataset config: each cache folder is judged by itself (buckets unknown); "
                "pass --config dataset.toml to compare it with its images and buckets"
            )
        unreadable = 0
        for source, folders in groups:
            archs = _archs(folders, options.model_family, source)
            for folder in folders:
                for name in folder.names:  # another architecture's files: musubi's glob for this one skips them
                    parsed = rules.parse_cache_name(name)
                    if parsed is not None and parsed.arch not in archs:
                        plan.extra.add(os.path.join(folder.cache, name))
                for arch in archs:
                    unreadable += _expect(plan, folder, rules.ARCHS[arch])
        if unreadable:
            plan.notes.append(f"{unreadable} image(s) could not be opened and were not compared")
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        from cachedoctor.layouts import _musubi_rules as rules

        parsed = rules.parse_cache_name(os.path.basename(path))
        arch = rules.ARCHS.get(parsed.arch) if parsed is not None else None
        if parsed is None or arch is None:
            return None, "not a musubi-tuner cache file name; let musubi-tuner re-cache it"
        if expected.role == "text":
            return None, (
                f"musubi-tuner's {arch.short} text-encoder outputs come from its own text encoders, which this "
                f"repair does not run; re-cache them with musubi-tuner's {arch.te_script}"
            )
        if arch.recompute_why is not None:
            return None, arch.recompute_why
        if parsed.window is not None:
            return (
                None,
                "a clip window is encoded by a 3D video VAE, which this repair does not run; re-cache it with musubi-tuner",
            )
        hw = expected.latent_hw or _hw_of(path)
        if hw is None or parsed.size is None:
            return None, NO_BUCKET
        dtype = _latent_dtype(template) or arch.latent_dtype
        key = rules.latent_key(arch.short, hw[0], hw[1], dtype)
        metadata = rules.latent_metadata(arch.short, parsed.size)
        return RecomputeSpec(
            "latent",
            expected.source,
            "dict",
            "safetensors",
            key,
            dtype,
            False,  # Z-Image's latent is the posterior's mode as it is (zimage_cache_latents.py:65-74)
            hw,
            keys=(key,),
            template=template.path if template else None,
            prepare="musubi",
            metadata=tuple(metadata.items()),
            posterior=arch.posterior,
        ), None


#: A dataset config found by ``--layout auto`` is read only when it is this small (they are a few KB).
_CONFIG_BYTES = 64 * 1024


def _configs_in(folder: str, names: set[str]) -> list[str]:
    """The musubi-tuner dataset configs (``*.toml`` that ``configs.identify`` says are musubi's)
    right in ``folder``: ``--layout auto`` pointed at a dataset root finds them."""
    from cachedoctor.layouts.configs import identify

    found = []
    for name in sorted(n for n in names if n.endswith(".toml")):
        path = os.path.join(folder, name)
        try:
            if os.path.getsize(path) > _CONFIG_BYTES or identify(path)[0] != "musubi":
                continue
        except (OSError, LayoutError):
            continue
        found.append(path)
    return found


def _from_config(config: str) -> list[_Folder]:
    from cachedoctor.layouts._musubi_config import load_dataset_config  # only with a config: scans start light

    datasets = load_dataset_config(config)
    if not datasets:
        raise LayoutError(
            config, "names no dataset ([[datasets]] with image_directory or video_directory): nothing to check"
        )
    for d in datasets:
        _require_sources(config, d)
    return [_Folder(d.cache_directory, d, names_in(d.cache_directory)) for d in datasets]


def _require_sources(config: str, dataset: MusubiDataset) -> None:
    """A dataset's image or video folder (or JSONL file) must be there: without it musubi finds
    no item and every cache file would look orphaned (an unmounted disk or a typo is never a
    reason to quarantine a cache)."""
    kind = dataset.kind
    for key, named, exists, what in (
        (f"{kind}_directory", getattr(dataset, f"{kind}_directory"), os.path.isdir, "folder"),
        (f"{kind}_jsonl_file", getattr(dataset, f"{kind}_jsonl_file"), os.path.isfile, "file"),
    ):
        if named is not None and not exists(named):
            raise LayoutError(
                config, f"datasets[{dataset.index}]: {key} {named} is no {what}; check the path (is its disk mounted?)"
            )


def _from_targets(targets: list[str]) -> list[_Folder]:
    """Without a config: every folder below the targets that holds musubi cache files."""
    from cachedoctor.layouts import _musubi_rules as rules

    found: list[_Folder] = []
    for target in targets:
        if not os.path.isdir(target):
            raise LayoutError(target, "no such cache folder; check the path, or pass the dataset config (--config)")
        for folder, subdirs, files in os.walk(target):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
            names = set(files)
            if any((p := rules.parse_cache_name(n)) is not None and p.arch in rules.ARCHS for n in names):
                found.append(_Folder(folder, None, names))
    return found


def _archs(folders: list[_Folder], named: str | None, config: str | None) -> list[str]:
    """The architectures to judge: ``--model-family`` (musubi's short name), else each one whose
    files the cache folders hold (a folder may hold several runs' caches)."""
    from cachedoctor.layouts import _musubi_rules as rules

    if named is not None:
        if named not in rules.ARCHS:
            raise LayoutError(
                config or (folders[0].cache if folders else "."),
                f"--model-family {named} is not a musubi-tuner architecture; use one of {', '.join(rules.ARCHS)}",
            )
        return [named]
    counts: Counter[str] = Counter()
    for folder in folders:
        counts.update(
            p.arch for n in folder.names if (p := rules.parse_cache_name(n)) is not None and p.arch in rules.ARCHS
        )
    if not counts and config is not None:
        raise LayoutError(
            config,
            "its cache directories hold no musubi-tuner cache file, so the architecture is unknown: "
            "pass --model-family (musubi's short name: " + ", ".join(rules.ARCHS) + ")",
        )
    return sorted(counts)


def _expect(plan: DatasetPlan, folder: _Folder, arch: rules.Arch) -> int:
    """Expected entries of ``arch`` in ``folder``; returns the images that could not be opened."""
    from cachedoctor.layouts import _musubi_rules as rules

    dataset = folder.dataset
    if dataset is None:
        return _expect_alone(plan, folder, arch)
    if dataset.kind == "video":
        _expect_clips(plan, folder, dataset, arch)
        return 0
    unreadable = 0
    for image, caption, text in _image_items(dataset):
        size = image_size(image)
        if size is None:
            unreadable += 1
            continue
        plan.items += 1
        bucket = rules.bucket_resolution(
            size, dataset.resolution, dataset.enable_bucket, dataset.bucket_no_upscale, arch.short
        )
        hw = (bucket[1] // arch.downscale, bucket[0] // arch.downscale)
        name = rules.latent_cache_name(image, size, arch.short)
        frames = 1 if arch.layout == "CFHW" else None
        plan.add(
            Expected(
                os.path.join(folder.cache, name),
                image,
                "latent",
                _mtime(image),
                latent_hw=hw,
                latent_key=_family(arch),
                frames=frames,
                hints=(("bucket", bucket), ("original_size", size), *_scaling(arch)),
            )
        )
        _expect_text(plan, folder, arch, image, caption, text)
    return unreadable


def _expect_alone(plan: DatasetPlan, folder: _Folder, arch: rules.Arch) -> int:
    """A cache folder without its config: each latent needs its text file; images beside it
    (musubi's default cache_directory) are paired with their latents by name."""
    from cachedoctor.layouts import _musubi_rules as rules

    latents: dict[str, list[str]] = defaultdict(list)
    for name in folder.names:
        parsed = rules.parse_cache_name(name)
        if parsed is not None and parsed.arch == arch.short and not parsed.is_te:
            latents[parsed.item_key].append(name)
    # images with a .txt caption beside the cache: musubi's default cache_directory is the image folder,
    # and it caches only images that have a caption file (media_utils.py glob_images)
    images = {
        stem(n): n for n in folder.names if n.endswith(rules.IMAGE_EXTENSIONS) and stem(n) + ".txt" in folder.names
    }
    unreadable = 0
    for key, image_name in sorted(images.items()):
        image = os.path.join(folder.cache, image_name)
        size = image_size(image)
        if size is None:
            unreadable += 1
            continue
        plan.items += 1
        name = rules.latent_cache_name(image, size, arch.short)
        plan.add(Expected(os.path.join(folder.cache, name), image, "latent", _mtime(image), image_size=size))
        _expect_text(plan, folder, arch, image, os.path.join(folder.cache, key + ".txt"), None)
    for key, names in sorted(latents.items()):
        if key in images:
            continue
        for name in names:  # the latent stands for its item: its text file is expected
            latent = os.path.join(folder.cache, name)
            plan.add(Expected(latent, latent, "latent"))
        source = os.path.join(folder.cache, sorted(names)[0])
        plan.add(Expected(os.path.join(folder.cache, rules.te_cache_name(key, arch.short)), source, "text"))
    return unreadable


def _expect_text(
    plan: DatasetPlan, folder: _Folder, arch: rules.Arch, item: str, caption: str | None, text: str | None
) -> None:
    """The item's text file; stale when its ``caption1`` is not today's caption."""
    from cachedoctor.layouts import _musubi_rules as rules

    te = os.path.join(folder.cache, rules.te_cache_name(item, arch.short))
    if text is None and caption is not None:
        try:
            with open(caption, encoding="utf-8") as handle:
                text = handle.read().strip()  # datasources.py:243-245
        except (OSError, UnicodeDecodeError):
            text = None
    stale = None
    if text is not None and os.path.basename(te) in folder.names:
        recorded = (header_metadata(te) or {}).get("caption1")
        if recorded is not None and recorded != text:
            stale = f"its caption1 is {_quoted(recorded)} but the caption is now {_quoted(text)}"
    source = caption or item
    plan.add(Expected(te, source, "text", _mtime(source), stale_reason=stale, text=text))


def _expect_clips(plan: DatasetPlan, folder: _Folder, dataset: MusubiDataset, arch: rules.Arch) -> None:
    """Clips: each needs its text file and at least one cached window; a cached window's latent
    must have the frames its window compresses to, at the bucket its name says."""
    from cachedoctor.layouts import _musubi_rules as rules

    windows: dict[str, list[rules.Parsed]] = defaultdict(list)
    for name in folder.names:
        parsed = rules.parse_cache_name(name, "video")
        if parsed is not None and not parsed.is_te and parsed.arch == arch.short and parsed.window is not None:
            windows[parsed.item_key].append(parsed)
    clips = rules.video_items(dataset.video_directory) if dataset.video_directory else []
    for clip in clips:
        plan.items += 1
        key = stem(clip)
        mtime = _mtime(clip)
        found = windows.get(key, [])
        for parsed in sorted(found, key=lambda p: p.window or (0, 0)):
            assert parsed.window is not None and parsed.size is not None
            w, h = parsed.size
            name = rules.latent_cache_name(clip, parsed.size, arch.short, parsed.window, parsed.section)
            plan.add(
                Expected(
                    os.path.join(folder.cache, name),
                    clip,
                    "latent",
                    mtime,
                    latent_hw=(h // arch.downscale, w // arch.downscale),
                    latent_key=_family(arch),
                    frames=(parsed.window[1] - 1) // FRAME_STRIDE + 1,
                )
            )
        if not found:  # no window cached at all: which windows musubi would cut needs the decoded clip
            missing = os.path.join(folder.cache, f"{key}_*_{arch.short}.safetensors")
            plan.add(Expected(missing, clip, "latent", mtime))
        caption = os.path.splitext(clip)[0] + (dataset.caption_extension or ".txt")
        _expect_text(plan, folder, arch, clip, caption if os.path.isfile(caption) else None, None)


def _image_items(dataset: MusubiDataset) -> list[tuple[str, str | None, str | None]]:
    """``(image, caption file or None, caption text or None)`` of an image dataset, as its
    datasource lists them: a folder's images with a caption file, or a JSONL file's rows."""
    from cachedoctor.layouts import _musubi_rules as rules

    if dataset.image_directory is not None:
        ext = dataset.caption_extension or ".txt"
        return [(p, os.path.splitext(p)[0] + ext, None) for p in rules.image_items(dataset.image_directory, ext)]
    assert dataset.image_jsonl_file is not None
    out: list[tuple[str, str | None, str | None]] = []
    base = os.path.dirname(dataset.image_jsonl_file)
    try:
        with open(dataset.image_jsonl_file, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    image = row.get("image_path", row.get("image_path_0"))
                    text = row["caption"]
                except (ValueError, KeyError, AttributeError):
                    raise LayoutError(
                        dataset.image_jsonl_file, f"line {number} is not a JSON object with image_path and caption"
                    ) from None
                out.append((os.path.normpath(os.path.join(base, str(image))), None, str(text)))
    except OSError as exc:
        raise LayoutError(dataset.image_jsonl_file, f"cannot be read ({exc.strerror}); check the path") from None
    return out


def _scaling(arch: rules.Arch) -> tuple[tuple[str, str], ...]:
    """How musubi transforms this arch's latent before saving, where it is a manifest's words:
    ``raw`` (the posterior as it is: Z-Image); other transforms have none."""
    return (("scaling", "raw"),) if arch.transform.startswith("none") and arch.recompute_why is None else ()


def _family(arch: rules.Arch) -> str:
    """The family of the arch's main latent key (``latents_FxHxW``; FLUX.2's ``latents_HxW``)."""
    from cachedoctor.layouts import _musubi_rules as rules

    return keynames.family(rules.latent_key(arch.short, 1, 1, arch.latent_dtype))


def _hw_of(path: str) -> tuple[int, int] | None:
    """The latent size the entry's own key spells, when the file still reads."""
    meta = _recompute.own_meta(path) if os.path.exists(path) else None
    for t in meta.tensors if meta else ():
        parsed = keynames.parse(t.key)
        if parsed.dims is not None and parsed.family in ("latents_FxHxW", "latents_HxW"):
            return parsed.dims[-2], parsed.dims[-1]
    return None


def _latent_dtype(template: Template | None) -> str | None:
    if template is None:
        return None
    return next(
        (t.dtype for t in template.meta.tensors if keynames.family(t.key) in ("latents_FxHxW", "latents_HxW")), None
    )


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _quoted(text: str) -> str:
    return json.dumps(text if len(text) <= 60 else text[:57] + "...", ensure_ascii=False)
