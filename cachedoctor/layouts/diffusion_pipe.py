"""tdrussell/diffusion-pipe: items in SQLite-indexed shards, one cache folder per size bucket.

diffusion-pipe (8f83dbf) caches each ``[[directory]]`` of its dataset TOML under
``<path>/cache/<model name>/``: per size bucket ``cache_<ar>x<w>x<h>x<frames>/latents/`` and per
aspect group ``ar_frames_<ar>_<frames>/text_embeddings_<i>/``, each a ``Cache``: ``shard_<N>.bin``
files of ``torch.save`` archives back to back and ``metadata.db`` saying where each item is
(``formats/torch_shard.py`` reads every item). Each latent item is a dict holding ``latents``,
``mask``, ``image_spec`` (``[None, '<path>/<image>']``) and ``caption``. Its rules are
re-implemented in ``_diffusion_pipe_rules`` (with file:line references).

What the trainer does with it decides what is a finding here. It checks a fingerprint of the
dataset's *listing* (paths, captions, buckets): an added, removed or re-captioned image changes
it, and diffusion-pipe deletes that cache and makes it again by itself (``utils/cache.py``
``clear``). It does not look at pixels, file times or the bytes of its shards. So:

- an image whose file changed after the shard holding its item was written is a ``stale-entry``
  of that shard (diffusion-pipe trains on the old latent without a word), and an item whose
  image is gone likewise (its listing changed: the next start rebuilds, unless the cache is
  trusted);
- with the dataset TOML, an image that falls in a bucket whose index does not list it is a
  ``missing-entry`` of that folder's ``metadata.db`` (the cache predates it);
- each item's latent must have its folder's bucket size (``shape-mismatch``), and a shard the
  index does not list is an orphan; damage inside an item is the readers' (``item <i>/...``).

Repair cannot make an item again (only diffusion-pipe's own pipeline can), but the trainer
can: it resumes caching at the first item its index does not list. So a damaged, stale or
unsafe item is dropped with every item after it in its folder (``repair/shards.py``), and the
next run of the trainer re-caches them; what is dropped goes to the quarantine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from cachedoctor.layouts._images import image_size, names_in
from cachedoctor.layouts._listing import any_starting
from cachedoctor.layouts.interface import (
    Claim,
    DatasetPlan,
    Expected,
    Layout,
    LayoutError,
    LayoutOptions,
    SpecOrWhy,
    Template,
)

INDEX = "metadata.db"
_SHARD = re.compile(r"^shard_(\d+)\.bin$")
_TEXT = re.compile(r"^text_embeddings_\d+$")  # ar_frames_<ar>_<frames>/text_embeddings_<i> (dataset.py:196)
_FOLDER = re.compile(r"^cache_(?:(\d+\.\d+)x)?(\d+)x(\d+)x(\d+)$")
#: model name -> (VAE spatial downscale, temporal compression) for models whose latents cachedoctor
#: can size from the bucket (their VAEs: Flux/SDXL/SD3 AutoencoderKL 8x, Wan and HunyuanVideo 3D
#: VAEs 8x spatial and 4x in time); other models' latents are not sized (their folders still are
#: judged item by item)
LATENT_GRID = {"flux": (8, 1), "chroma": (8, 1), "sdxl": (8, 1), "sd3": (8, 1), "wan": (8, 4), "hunyuan-video": (8, 4)}
#: file times closer than this are not judged (coarse file-system clocks): as ``stale-entry``'s
MTIME_TOLERANCE_NS = 2_000_000_000
BLOCKED = (
    "diffusion-pipe makes an item only in its own pipeline; its next run re-caches every item its index "
    "does not list (repair drops damaged items, never writes one)"
)


@dataclass(frozen=True, slots=True)
class _Folder:
    """One ``latents`` cache folder: its bucket, model and dataset directory."""

    path: str
    bucket: tuple[int, int, int] | None  # (w, h, frames) from its parent's name
    model: str | None  # the ``cache/<model>`` folder above it
    dataset_dir: str | None  # the directory whose images it caches


class DiffusionPipeLayout(Layout):
    name = "diffusion-pipe"
    summary = "tdrussell diffusion-pipe: shard_<N>.bin + metadata.db per size bucket under <dataset>/cache/<model>/"

    def claim(self, folder: str, names: set[str]) -> Claim | None:
        if INDEX in names and any(_SHARD.match(n) for n in names):
            return Claim(folder, os.path.join(folder, INDEX), "indexes the cache")
        return None

    def resembles(self, names: set[str]) -> bool:
        return any_starting(names, "shard_") and any(n.startswith("shard_") and _SHARD.match(n) for n in names)

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        config = (
            options.trainer_config[1] if options.trainer_config and options.trainer_config[0] == self.name else None
        )
        expected_images: dict[str, dict[str, str]] = {}  # latents folder -> image path -> why expected
        if config is not None:
            folders, expected_images, notes = _from_config(config, options.model_family)
        else:
            folders, notes = [f for t in targets for f in _from_targets(t)], []
        # walked: the whole cache/<model> trees (text-embedding shards too); owned: the latents folders
        roots = {os.path.dirname(os.path.dirname(f.path)) for f in folders} if config else set(targets)
        plan = DatasetPlan(self.name, sorted(roots))
        plan.entry_suffixes = (".bin",)
        plan.notes.extend(notes)
        plan.owned = [f.path for f in folders]
        for folder in folders:
            _expect(plan, folder, expected_images.get(folder.path))
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        return None, BLOCKED


def _model_folders(cache: str) -> list[str]:
    """The ``cache/<model>`` folders diffusion-pipe made (dataset.py:482): a folder that holds its
    ``metadata`` folder or a cache folder with an index. A hidden folder (cachedoctor's own
    ``.cachedoctor``), an empty one or another tool's is no model's cache."""
    found = []
    for name in sorted(names_in(cache)):
        folder = os.path.join(cache, name)
        if name.startswith(".") or not os.path.isdir(folder):
            continue
        inside = names_in(folder)
        if "metadata" in inside or any(
            os.path.isfile(os.path.join(folder, sub, "latents", INDEX))
            or os.path.isfile(os.path.join(folder, sub, INDEX))
            for sub in inside
        ):
            found.append(name)
    return found


def _from_targets(target: str) -> list[_Folder]:
    """Every ``latents`` and ``text_embeddings_<i>`` cache folder below ``target`` (the
    unconditional embeddings name no image: they are judged by the scan as they are)."""
    if not os.path.isdir(target):
        raise LayoutError(target, "no such folder; check the path, or pass diffusion-pipe's dataset config (--config)")
    found = []
    for folder, subdirs, files in os.walk(target):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        if INDEX in files and (os.path.basename(folder) == "latents" or _TEXT.match(os.path.basename(folder))):
            found.append(_folder(folder))
    return found


def _folder(path: str, dataset_dir: str | None = None) -> _Folder:
    """What a ``.../cache/<model>/cache_<bucket>/latents`` path says of itself."""
    bucket_dir = os.path.dirname(path)
    model_dir = os.path.dirname(bucket_dir)
    match = _FOLDER.match(os.path.basename(bucket_dir))
    bucket = (int(match.group(2)), int(match.group(3)), int(match.group(4))) if match else None
    if dataset_dir is None and os.path.basename(os.path.dirname(model_dir)) == "cache":
        dataset_dir = os.path.dirname(os.path.dirname(model_dir))
    return _Folder(path, bucket, os.path.basename(model_dir) if match else None, dataset_dir)


def _from_config(path: str, model: str | None) -> tuple[list[_Folder], dict[str, dict[str, str]], list[str]]:
    """The latents folders a dataset TOML (or a training TOML naming one) caches into, and per
    folder the images diffusion-pipe puts in its bucket."""
    from cachedoctor import toml
    from cachedoctor.layouts import _diffusion_pipe_rules as rules  # only with a config: scans start light

    with open(path, "rb") as handle:
        data = toml.load(handle)
    notes: list[str] = []
    dataset_path = path
    if isinstance(data.get("model"), dict) and isinstance(data.get("dataset"), str):  # the training config
        model_type = data["model"].get("type")
        model = model or rules.MODEL_NAMES.get(str(model_type))
        dataset_path = os.path.join(os.path.dirname(path), data["dataset"])
        if not os.path.isfile(dataset_path):
            raise LayoutError(path, f"its dataset = {data['dataset']!r} is no file; fix the path")
    config = rules.load_dataset_config(dataset_path, base=os.path.dirname(os.path.abspath(dataset_path)))
    folders: list[_Folder] = []
    expected: dict[str, dict[str, str]] = {}
    for directory in config.directories:
        models = [model] if model else _model_folders(os.path.join(directory.resolved, "cache"))
        if not models:
            notes.append(f"{directory.resolved}: no cache/<model> folder yet: nothing cached to check")
        for name in models:
            root = rules.cache_root(directory.resolved, name)
            round_to = rules.PIXELS_ROUND_TO_MULTIPLE.get(name, 16)
            for image in rules.listed(sorted(names_in(directory.resolved))):
                full = os.path.join(directory.resolved, image)
                size = image_size(full) if os.path.isfile(full) else None
                if size is None or not os.path.isfile(os.path.splitext(full)[0] + ".txt"):
                    continue  # diffusion-pipe drops unreadable and uncaptioned images (dataset.py:755-757)
                for key in rules.bucket_for(size, 1, directory, round_to):
                    latents = os.path.join(root, rules.cache_folder_name(key), "latents")
                    expected.setdefault(latents, {})[full] = rules.cache_folder_name(key)
                group = rules.group_key(size, 1, directory)
                if group is not None:  # its caption's embeddings, once per aspect group and text encoder
                    texts = os.path.join(root, rules.ar_frames_folder_name(group))
                    for name in sorted(n for n in names_in(texts) if _TEXT.match(n)):
                        expected.setdefault(os.path.join(texts, name), {})[full] = rules.ar_frames_folder_name(group)
            for found in _from_targets(root) if os.path.isdir(root) else []:
                folders.append(_folder(found.path, directory.resolved))
            folders += [
                _folder(p, directory.resolved)
                for p in sorted(expected)
                if p.startswith(root + os.sep) and p not in {f.path for f in folders}
            ]
    return folders, expected, notes


def _expect(plan: DatasetPlan, folder: _Folder, images: dict[str, str] | None) -> None:
    """Each shard the index lists, with its items' latents sized by the bucket and judged
    against their images' times; the bucket's images the index does not list (with the TOML)."""
    from cachedoctor.formats.interface import ReadError
    from cachedoctor.formats.torch_shard import read_index

    index_path = os.path.join(folder.path, INDEX)
    try:
        index = read_index(folder.path) if os.path.isfile(index_path) else None
    except ReadError as exc:  # reported on its shards (corrupt-archive); what it lists is unknown
        plan.notes.append(f"{index_path}: {exc.message}; its shards are judged without it")
        plan.no_orphans.add(folder.path)
        return
    if index is None:  # what the shards hold is unknown: none of them is an orphan for that
        plan.no_orphans.add(folder.path)
    text = _TEXT.match(os.path.basename(folder.path)) is not None  # a caption's embeddings, not a latent
    role = "text" if text else "latent"
    hw, frames = _latent_size(folder)
    cached: set[str] = set()
    unknown = 0  # items whose image_spec does not read (damaged): reported as such, their images unknown
    for number in sorted(index.shards) if index else ():
        shard = os.path.join(folder.path, f"shard_{number}.bin")
        sources = _item_sources(shard, folder)
        unknown += len(index.items_of(number)) - len(sources) if index else 0
        cached.update(s for _, s in sources)
        plan.items += len(sources)
        # a caption that changed changes the listing's fingerprint: diffusion-pipe rebuilds by itself
        stale, why = _stale(shard, sources) if not text else ((), None)
        plan.add(
            Expected(
                shard,
                folder.dataset_dir or folder.path,  # a shard holds many images: the dataset is its source
                role,
                latent_hw=hw,
                latent_key=None if text else "item */latents",
                frames=frames,
                stale_reason=why,
                items=stale,
                hints=(
                    ("sources", tuple(image for _, image in sources)),  # a manifest row per item
                    ("item_sources", tuple(sources)),  # a finding about one item names its image
                ),
            )
        )
    if unknown:  # a damaged item may be one of them: it is reported, and re-cached once dropped
        return
    for image in sorted(set(images or ()) - cached):
        plan.add(Expected(index_path, image, role, in_index=False), folder.path)


def _latent_size(folder: _Folder) -> tuple[tuple[int, int] | None, int | None]:
    grid = LATENT_GRID.get(folder.model or "")
    if folder.bucket is None or grid is None:
        return None, None
    w, h, frames = folder.bucket
    spatial, temporal = grid
    return (h // spatial, w // spatial), ((frames - 1) // temporal + 1 if temporal > 1 and frames > 1 else None)


def _item_sources(shard: str, folder: _Folder) -> list[tuple[int, str]]:
    """``(item index, image path)`` of each item the shard holds, from its ``image_spec``
    (``[None, '<path as written>/<image>']``: diffusion-pipe lists a directory's own files, so the
    image is that name in the dataset directory)."""
    from cachedoctor.formats import ReadError, read_file

    try:
        meta = read_file(shard, deep=False)
    except (ReadError, OSError):
        return []
    out = []
    for key, value in meta.texts if meta is not None else ():
        label, _, name = key.partition("/")
        if name == "image_spec[1]" and folder.dataset_dir is not None:
            image = value if os.path.isabs(value) else os.path.join(folder.dataset_dir, os.path.basename(value))
            out.append((int(label.rpartition(" ")[2]), image))
    return out


def _stale(shard: str, sources: Iterable[tuple[int, str]]) -> tuple[tuple[int, ...], str | None]:
    """The items whose image changed after the shard was written, or is gone, and why."""
    try:
        written = os.stat(shard).st_mtime_ns
    except OSError:
        return (), None
    stale: list[tuple[int, str]] = []
    for item, image in sources:
        try:
            if os.stat(image).st_mtime_ns > written + MTIME_TOLERANCE_NS:
                stale.append(
                    (item, f"item {item}'s image {os.path.basename(image)} changed after the shard was written")
                )
        except OSError:
            stale.append((item, f"item {item}'s image {os.path.basename(image)} no longer exists"))
    if not stale:
        return (), None
    more = f" (+{len(stale) - 1} more)" if len(stale) > 1 else ""
    return tuple(i for i, _ in stale), stale[0][1] + more


__all__ = ["BLOCKED", "DiffusionPipeLayout"]
