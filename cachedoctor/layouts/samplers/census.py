"""The buckets of a run: latent entries of a dataset plan counted per bucket and dataset.

The scan's dataset matcher consumes the plan folder by folder, so the engine takes this census
before the scan starts (:func:`gather`). It costs one pass over the expected entries and no I/O:
a million entries in well under a second (``bench/rank_sim_bench.py``).

The world and batch size of each dataset are the caller's (``--world-size``/``--batch-size``)
where given, else what the trainer's configuration holds (``Sampling``); a dataset that lacks
one of the two is not judged, and a note says which one is missing.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import DatasetPlan
    from cachedoctor.layouts.samplers.interface import Buckets, Sampling


#: layouts whose items cachedoctor can count per bucket (a mixed tree has several samplers)
_MODELLED = ("simpletuner", "kohya", "manifest", "onetrainer")


class _Tally:
    __slots__ = ("counts", "index", "info", "listed", "sequence", "unknown")

    def __init__(self, info: Sampling | None) -> None:
        self.info = info
        self.index: dict[str, int] = {}
        self.counts: list[int] = []
        self.listed: list[int] = []
        self.sequence = array("I")
        self.unknown = 0


def gather(plan: DatasetPlan | None, world_size: int | None, batch_size: int | None) -> tuple[list[Buckets], list[str]]:
    """The datasets to judge (with their world and batch size) and notes on what is missing."""
    if plan is None:
        return [], []  # the scan counts the latent shapes it reads instead (:func:`from_shapes`)
    infos = plan.sampling
    if world_size is None and batch_size is None and not any(i.world_size or i.batch_size for i in infos):
        return [], []  # nothing says this is a multi-GPU run: stay silent, pay nothing
    if plan.layout not in _MODELLED:
        return [], [f"rank balance not judged: {plan.layout}'s sampler is not modelled"]
    from cachedoctor.layouts.samplers.interface import (
        Buckets,
    )  # here: a scan of no multi-GPU run never needs the samplers

    tallies = _count(plan, infos)
    for known in infos:
        if known.counts is not None and known.name not in tallies:  # the trainer's own index
            tally = tallies[known.name] = _Tally(known)
            tally.index = {b: i for i, b in enumerate(known.counts)}
            tally.counts = list(known.counts.values())
            tally.listed = list(tally.counts)
    out: list[Buckets] = []
    notes: list[str] = []
    for name, tally in tallies.items():
        info = tally.info
        world = world_size or (info.world_size if info else None)
        batch = batch_size or (info.batch_size if info else None)
        if not tally.counts:
            if tally.unknown:
                notes.append(
                    f"dataset {name!r}: no bucket is known for its {tally.unknown} image(s) (kohya: pass "
                    "--resolution or --kohya-config); rank balance not judged"
                )
            continue
        if world is None or batch is None:
            missing = "world size (--world-size)" if world is None else "batch size (--batch-size)"
            notes.append(f"dataset {name!r}: no {missing} given or in the trainer's config; rank balance not judged")
            continue
        beyond = out_of_range(world, batch)
        if beyond:
            notes.append(f"dataset {name!r}: {beyond}; rank balance not judged")
            continue
        if tally.unknown:
            notes.append(
                f"dataset {name!r}: {tally.unknown} image(s) with no known bucket were left out of the rank balance"
            )
        labels = list(tally.index)
        out.append(
            Buckets(
                name,
                dict(zip(labels, tally.counts, strict=True)),
                info.repeats if info else None,
                info.trainer if info else (plan.layout if plan.layout in ("simpletuner", "kohya") else None),
                dict(zip(labels, tally.listed, strict=True)),
                batch,
                world,
                dict(info.options) if info else {},
                tally.sequence,
                info.folders[0] if info and info.folders else (plan.roots[0] if plan.roots else ""),
            )
        )
    return out, notes


def _count(plan: DatasetPlan, infos: list[Sampling]) -> dict[str, _Tally]:
    tallies: dict[str, _Tally] = {}
    for folder, entries in plan.expected.items():
        info = _owner(folder, infos)
        if info is not None and info.counts is not None:
            continue  # counted from the trainer's own bucket index
        name = info.name if info is not None else plan.layout
        tally = tallies.get(name)
        if tally is None:
            tally = tallies[name] = _Tally(info)
        times = info.listed_times if info is not None else 1
        index, counts, listed, sequence = tally.index, tally.counts, tally.listed, tally.sequence
        for found in entries.values():
            for entry in found:
                if entry.role not in ("latent", "image") or not entry.source_exists or not entry.in_index:
                    continue
                hw = entry.latent_hw
                if hw is None and entry.shape is not None and len(entry.shape) >= 3:
                    hw = (entry.shape[-2], entry.shape[-1])  # a manifest's exact shape
                if hw is None:
                    tally.unknown += 1 + len(entry.also)
                    continue
                label = f"{hw[0]}x{hw[1]}"
                i = index.get(label)
                if i is None:
                    i = index[label] = len(counts)
                    counts.append(0)
                    listed.append(0)
                if entry.also:  # items that collide on one file are each sampled
                    n = 1 + len(entry.also)
                    counts[i] += n
                    listed[i] += n * times
                    sequence.extend([i] * n)
                else:
                    counts[i] += 1
                    listed[i] += times
                    sequence.append(i)
    return tallies


def _owner(folder: str, infos: list[Sampling]) -> Sampling | None:
    """The dataset whose cache folder holds ``folder`` (the deepest one)."""
    best: Sampling | None = None
    depth = -1
    for info in infos:
        for root in info.folders:
            if (folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)) and len(root) > depth:
                best, depth = info, len(root)
    return best


#: tensor keys (key families, as peers see them) that hold a latent: a bare tensor (""), kohya's
#: ``latents`` (and multi-resolution ``latents_HxW``), musubi-tuner's ``latents_FxHxW``, a dict's ``latent``
LATENT_KEYS = ("", "latents", "latent", "latents_HxW", "latents_FxHxW")


def latent_hw(tensors: Iterable[tuple[str, tuple[int, ...]]]) -> tuple[int, int] | None:
    """The latent's (H, W) among one file's ``(key, shape)`` tensors, or ``None``: ``[C, H, W]``
    (C > 1: a ``[1, L, D]`` text embed is not one), ``[1, C, H, W]``, ``[C, F, H, W]``."""
    for key, shape in tensors:
        if key in LATENT_KEYS and ((len(shape) == 3 and shape[0] > 1) or len(shape) == 4):
            return shape[-2], shape[-1]
    return None


def from_shapes(
    counts: Mapping[tuple[int, int], int], where: str, world_size: int | None, batch_size: int | None
) -> tuple[list[Buckets], list[str]]:
    """The run's buckets when the scan knows no dataset: the latent shapes it read (or took from
    the state database: a folder recorded without them is taken file by file), as one dataset
    whose trainer is unknown (Sana's rules stand in, and the finding says so)."""
    if world_size is None and batch_size is None:
        return [], []
    notes: list[str] = []
    if world_size is None or batch_size is None:
        missing = "world size (--world-size)" if world_size is None else "batch size (--batch-size)"
        return [], [*notes, f"no {missing} given; rank balance not judged"]
    beyond = out_of_range(world_size, batch_size)
    if beyond:
        return [], [*notes, f"{beyond}; rank balance not judged"]
    if not counts:
        return [], [*notes, "no latent found to count per bucket; rank balance not judged"]
    from cachedoctor.layouts.samplers.interface import Buckets

    buckets = Buckets(
        "cache",
        {f"{h}x{w}": n for (h, w), n in sorted(counts.items())},  # one order, however the folders came in
        batch_size=batch_size,
        world_size=world_size,
        path=where,
    )
    return [buckets], [*notes, "no dataset configuration: buckets counted from the latent shapes read, trainer unknown"]


def out_of_range(world_size: int, batch_size: int) -> str | None:
    """Why a run's size is not simulated: a trainer's config is untrusted input, and a world
    size of 10**20 would be a per-rank table of as many entries."""
    from cachedoctor.settings import MAX_BATCH_SIZE, MAX_WORLD_SIZE

    if not 1 <= world_size <= MAX_WORLD_SIZE:
        return f"a world size of {world_size} is outside 1..{MAX_WORLD_SIZE}"
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        return f"a batch size of {batch_size} is outside 1..{MAX_BATCH_SIZE}"
    return None
