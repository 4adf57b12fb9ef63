"""How a trainer's sampler deals a dataset's aspect buckets to the ranks of a multi-GPU run.

A multi-scale run is only in step while every rank takes the same number of optimizer steps
per epoch: a rank that runs out of batches first reaches a collective (an all-reduce, a
broadcast) that the others never join, and the run hangs until NCCL's watchdog kills it
(NVlabs/Sana issue #206: "Some NCCL operations have failed or timed out", second epoch).
Whether that happens is decided before the run starts by the bucket sizes, the world size and
the batch size, and by the sampler's rules: how it cuts batches (partial ones kept, padded or
dropped), whether it shards items or batches over the ranks, and what it pads.

Each :class:`Sampler` models one trainer's rules on bucket *counts* (never on items), so a
million-image dataset costs a few thousand operations. Each module's docstring names the
trainer commit read and the lines that define each rule; ``tests/unit/layouts/samplers``
compares the models with the trainers' own code run offline on the same buckets.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class Buckets:
    """One dataset as its sampler sees it: images per bucket, in the trainer's bucket order.

    ``repeats`` is the trainer's own setting, with the trainer's meaning (kohya ``num_repeats``:
    times listed, 1 = once; SimpleTuner ``repeats``: extra times, 0 = once). ``batch_size`` is
    this dataset's per-rank batch size where its configuration holds one (kohya's per-dataset
    ``batch_size``, SimpleTuner's ``train_batch_size``). ``options`` holds the trainer settings
    a model reads (SimpleTuner ``gradient_accumulation_steps``, ``max_train_steps``, ...).
    """

    name: str
    counts: Mapping[str, int]
    repeats: int | None = None
    trainer: str | None = None  # whose sampler deals it (``None``: not known, the default model)
    #: images per bucket as the trainer lists them with repeats (kohya: ``num_repeats`` per
    #: subset, which may differ within a bucket); ``None``: the same as ``counts``
    listed: Mapping[str, int] | None = None
    #: the buckets' indices (into ``counts``' order) of the items in dataset order, for a sampler
    #: that shards items by position (Sana's ranged sampler); empty: not recorded
    batch_size: int | None = None
    world_size: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    sequence: Sequence[int] = ()
    path: str = ""  # where the finding points: the dataset's (first) cache folder

    @property
    def images(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class Sampling:
    """What a layout read of how one dataset is sampled, from the trainer's configuration.

    ``folders`` are the cache folders whose latent entries belong to the dataset (with the
    folders below them). Several entries with one ``name`` are one dataset (kohya's subsets of
    a ``[[datasets]]`` table, each with its own ``listed_times``, its ``num_repeats``).
    """

    name: str
    trainer: str
    folders: tuple[str, ...]
    repeats: int | None = None
    listed_times: int = 1
    batch_size: int | None = None
    world_size: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    #: the trainer's own bucket index, images per bucket in its order (SimpleTuner's
    #: ``aspect_ratio_bucket_indices_<id>.json``, keyed by aspect ratio); ``None``: count the
    #: plan's latent entries by latent size
    counts: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class RankSplit:
    """What one epoch looks like on each rank.

    ``steps[r]`` is rank ``r``'s batches in the epoch; ``by_bucket[b][r]`` bucket ``b``'s share
    of them. ``dropped`` names buckets (with their image counts) that the trainer never trains;
    ``refused`` says why the trainer stops at start-up instead (``None``: it starts).
    ``epochs`` holds further epochs' step counts where they differ from the first (SimpleTuner's
    sampler starts each epoch at another bucket).
    """

    sampler: str
    steps: tuple[int, ...]
    by_bucket: dict[str, tuple[int, ...]]
    dropped: dict[str, int] = field(default_factory=dict)
    refused: str | None = None
    notes: tuple[str, ...] = ()
    epochs: tuple[tuple[int, ...], ...] = ()

    @property
    def uneven(self) -> bool:
        return any(len(set(steps)) > 1 for steps in (self.steps, *self.epochs))

    def responsible(self) -> list[str]:
        """The buckets whose share differs between ranks: the ones to fix."""
        return [b for b, steps in self.by_bucket.items() if len(set(steps)) > 1]


class Sampler(abc.ABC):
    """One trainer's rules for cutting batches and dealing them to ranks."""

    name: ClassVar[str]  # the trainer (as in the finding's details)
    commit: ClassVar[str]  # the trainer commit whose code the model follows
    #: the trainer option (or setting) that removes the imbalance, for the finding's message
    remedy: ClassVar[str] = ""

    def dropped_rule(self, world_size: int, batch_size: int) -> str:
        """Why this trainer drops a bucket, for ``dropped-bucket``'s message ("": said elsewhere)."""
        return ""

    @abc.abstractmethod
    def split(self, buckets: Buckets, world_size: int, batch_size: int) -> RankSplit:
        """One epoch of ``buckets`` over ``world_size`` ranks at ``batch_size`` per rank."""


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def share(count: int, world_size: int, rank: int) -> int:
    """Items of ``count`` that a contiguous even split gives ``rank`` (the first ``count %
    world_size`` ranks get one more)."""
    q, extra = divmod(count, world_size)
    return q + (1 if rank < extra else 0)
