"""SimpleTuner settings that lose or corrupt its caches, found while the layout plans.

Read from ``multidatabackend.json``, the ``config.json`` beside it and the cache folders they
name (SimpleTuner bc8e6ab):

- ``vae_cache_clear_each_epoch: true`` on more than one rank: the VAE cache is deleted at every
  epoch's end and rebuilt split over the ranks; entries go missing ("Some images were not
  correctly cached during the VAE Cache operations") where one GPU is fine.
- two image datasets whose ``cache_dir_vae`` is one folder: entries are named after the image's
  stem, so same-named images of the two datasets overwrite each other. SimpleTuner refuses two
  *identical* strings (``factory.py``: "is the same as another VAE image embed cache
  directory"), not two spellings of one folder (``cache/vae`` and ``./cache/vae/``, a symlink).
- a text-embed cache holding embeds of several model families (``-<family>.pt`` suffixes): runs
  of different families share it.
- ``compress_disk_cache`` off while the cache files are gzip: ``torch_load`` (``data_backend/
  local.py``) gunzips only when the option is on, so every file fails to load, and a file whose
  error says "invalid load key" is deleted. (On with plain files is harmless: its gunzip falls
  back to the raw bytes, so that is not reported.)
- a cache folder on a network file system written by several machines.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from itertools import combinations

from cachedoctor import fsinfo
from cachedoctor.layouts import _simpletuner_config as config
from cachedoctor.layouts._hazards import Hazard, accelerate_counts, count, sniff_gzip, truthy
from cachedoctor.layouts._images import names_in

CLEAR_EACH_EPOCH = "bghira/SimpleTuner#848, bghira/SimpleTuner#1474"
SHARED_VAE_DIR = "bghira/SimpleTuner#1074"
SHARED_TEXT_DIR = "bghira/SimpleTuner#1263, bghira/SimpleTuner#1646"
COMPRESSION = "bghira/SimpleTuner#1297"
MULTI_NODE = "bghira/SimpleTuner#1446"


def text_families(texts: Iterable[config.Backend]) -> dict[str, Counter[str]]:
    """Text-embed cache folder -> embeds per model family (the ``-<family>.pt`` suffix): one
    listing of each folder, for the layout's family guess and for :func:`hazards`."""
    found: dict[str, Counter[str]] = {}
    for text in texts:
        if text.cache_dir and text.cache_dir not in found:
            names = names_in(text.cache_dir)
            found[text.cache_dir] = Counter(n[:-3].rpartition("-")[2] for n in names if n.endswith(".pt") and "-" in n)
    return found


def most_common(families: dict[str, Counter[str]]) -> str | None:
    """The family most embeds carry, over every text-embed cache (what the trainer wrote)."""
    total: Counter[str] = sum(families.values(), Counter())
    return total.most_common(1)[0][0] if total else None


def hazards(
    cfg: config.SimpleTunerConfig, families: dict[str, Counter[str]] | None = None, mounts: str = fsinfo.MOUNTS
) -> list[Hazard]:
    """Every hazard of the config ``cfg``; ``families`` is :func:`text_families` of its text-embed
    datasets when the caller listed them already, ``mounts`` where the file systems are listed."""
    trainer_path = os.path.join(os.path.dirname(cfg.path), "config.json")
    trainer = config._trainer_config(cfg.path)
    processes, machines = run_size(trainer, cfg.base)
    images = [b for b in cfg.backends if b.dataset_type == "image"]
    texts = [b for b in cfg.backends if b.dataset_type == "text_embeds" and b.cache_dir]
    found: list[Hazard] = []
    for backend in images:
        if truthy(backend.raw.get("vae_cache_clear_each_epoch")):
            found.append(
                Hazard(
                    "vae-cache-clear-each-epoch",
                    cfg.path,
                    f"dataset {backend.id!r}: vae_cache_clear_each_epoch: true",
                    "SimpleTuner deletes this VAE cache at every epoch's end and rebuilds it split over the "
                    'ranks; on more than one GPU entries go missing ("Some images were not correctly cached '
                    'during the VAE Cache operations") and training stops',
                    '"vae_cache_clear_each_epoch": false',
                    CLEAR_EACH_EPOCH,
                    min_ranks=2,
                    config_ranks=processes,
                )
            )
    found.extend(_shared_vae_dirs(cfg, images))
    found.extend(_mixed_text_families(texts, families if families is not None else text_families(texts)))
    found.extend(_compression(cfg, trainer_path, images, texts))
    found.extend(_network(cfg, trainer_path, images, texts, machines, mounts))
    return found


def run_size(trainer: dict, base: str) -> tuple[int | None, int | None]:
    """``(processes, machines)`` from ``config.json`` (``num_processes``, ``num_machines``), else
    from the ``accelerate_config`` file it names. ``num_processes`` is the run's total over all
    machines (``accelerate launch --num_processes``, which SimpleTuner fills from it): the world
    size. The rank-imbalance census reads it too (``layouts/simpletuner.py``)."""
    processes = count(config._option(trainer, "num_processes"))
    machines = count(config._option(trainer, "num_machines"))
    named = config._option(trainer, "accelerate_config")
    if isinstance(named, str) and (processes is None or machines is None):
        path = os.path.expanduser(named)
        path = path if os.path.isabs(path) else os.path.join(base, path)
        acc_processes, acc_machines = accelerate_counts(path)
        processes = processes if processes is not None else acc_processes
        machines = machines if machines is not None else acc_machines
    return processes, machines


def _shared_vae_dirs(cfg: config.SimpleTunerConfig, images: list[config.Backend]) -> list[Hazard]:
    """Once per pair of image datasets whose ``cache_dir_vae`` is one folder."""
    by_folder: dict[str, list[config.Backend]] = {}
    for backend in images:
        if backend.cache_dir_vae:
            by_folder.setdefault(os.path.realpath(backend.cache_dir_vae), []).append(backend)
    found = []
    for folder, group in by_folder.items():
        for one, other in combinations(group, 2):
            same = one.raw.get("cache_dir_vae") == other.raw.get("cache_dir_vae")
            why = (
                "SimpleTuner refuses to start with two identical cache_dir_vae"
                if same
                else "spelled differently, so SimpleTuner's own check (it compares the strings) lets it through"
            )
            found.append(
                Hazard(
                    "shared-cache-dir-vae",
                    cfg.path,
                    f"datasets {one.id!r} and {other.id!r}: one cache_dir_vae ({folder})",
                    f"their latents are named after the image's stem, so same-named images of the two "
                    f"datasets overwrite each other's entries ({why}); name-collision lists each file",
                    "a cache_dir_vae of its own for each dataset (e.g. cache/vae/{model_family}/{id})",
                    SHARED_VAE_DIR,
                )
            )
    return found


def _mixed_text_families(texts: list[config.Backend], by_folder: dict[str, Counter[str]]) -> list[Hazard]:
    """A text-embed cache holding the embeds of more than one model family (on-disk fact)."""
    found = []
    for backend in texts:
        assert backend.cache_dir is not None
        families = by_folder.get(backend.cache_dir, Counter())
        if len(families) < 2:
            continue
        listed = ", ".join(f"{family} ({n})" for family, n in sorted(families.items()))
        found.append(
            Hazard(
                "shared-text-embed-cache",
                backend.cache_dir,
                f"text_embeds dataset {backend.id!r}: cache_dir {backend.cache_dir} holds embeds of {listed}",
                "runs of different model families share this text-embed cache, kept apart only by the "
                "-<family> suffix: a scan of one run takes the other families' embeds for orphans (repair "
                "quarantines them), and the family is read off the most common suffix",
                "a cache_dir of its own per model family (cache/text/{model_family})",
                SHARED_TEXT_DIR,
            )
        )
    return found


def _compression(
    cfg: config.SimpleTunerConfig, trainer_path: str, images: list[config.Backend], texts: list[config.Backend]
) -> list[Hazard]:
    """Caches whose files are gzip while the setting that reads them says plain."""
    found = []
    for backend in images + texts:
        folder = backend.cache_dir_vae if backend.dataset_type == "image" else backend.cache_dir
        local = backend.raw.get("compress_cache")
        compressed = bool(local) if local is not None else cfg.compressed
        if folder is None or compressed or not os.path.isdir(folder):
            continue
        gzipped, sampled = sniff_gzip(folder, ".pt")
        if not gzipped:
            continue
        where = cfg.path if local is not None else trainer_path
        spelled = "compress_cache: false" if local is not None else "compress_disk_cache off"
        found.append(
            Hazard(
                "compress-disk-cache",
                where,
                f"dataset {backend.id!r}: {spelled}, but {gzipped} of {sampled} sampled files in {folder} are gzip",
                "SimpleTuner gunzips only with the option on, so it cannot load these files, and it deletes "
                "each one whose error says 'invalid load key'",
                '"compress_disk_cache": true in config.json (or re-cache this folder)'
                if local is None
                else f'"compress_cache": true for dataset {backend.id!r} (or re-cache this folder)',
                COMPRESSION,
            )
        )
    return found


def _network(
    cfg: config.SimpleTunerConfig,
    trainer_path: str,
    images: list[config.Backend],
    texts: list[config.Backend],
    machines: int | None,
    mounts: str,
) -> list[Hazard]:
    """Cache folders on a network file system that several machines write (or may write)."""
    if machines == 1:
        return []
    folders = [b.cache_dir_vae for b in images] + [b.cache_dir for b in texts]
    found = []
    for folder in dict.fromkeys(f for f in folders if f and os.path.isdir(f)):
        kind = fsinfo.filesystem_type(folder, mounts)
        if kind is None or not fsinfo.is_network(folder, mounts):
            continue
        who = (
            f"{machines} machines (num_machines in {trainer_path}) write and list this cache at once"
            if machines
            else "if the run spans more than one machine, they all write and list this cache at once"
        )
        found.append(
            Hazard(
                "network-cache-multi-node",
                folder,
                f"cache folder on {kind}",
                f"{who}; a network file system caches attributes and listings per machine, so one node "
                "can miss entries another wrote, and the trainer stops on a missing cache file",
                "a node-local cache_dir per machine (or cache once on one machine before the run)",
                MULTI_NODE,
            )
        )
    return found


__all__ = ["hazards"]
