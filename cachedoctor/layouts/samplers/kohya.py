"""kohya-ss sd-scripts: batches cut per bucket in the dataset, then dealt by accelerate
(sd-scripts commit 48d368f, ``library/train_util.py``; accelerate's ``data_loader.py``).

Rules:

- Listing (``BaseDataset.make_buckets``, 1054-1056): each image is added to its bucket
  ``num_repeats`` times (a subset's setting), so a bucket holds images x repeats.
- Batching (1077-1084): each bucket is cut into ``ceil(listed / batch_size)`` batches; the last
  one may be partial and is kept. No bucket is ever dropped for being small.
- Dealing (``train_network.py`` 780-787 and ``accelerator.prepare``): the dataset *is* the list
  of batches (``__getitem__`` returns a whole batch); datasets are concatenated
  (``DatasetGroup``, a ``ConcatDataset``) and loaded with ``batch_size=1, shuffle=True``;
  ``accelerator.prepare`` shards that loader with ``BatchSamplerShard`` and, with
  ``even_batches`` on (its default), tops the last round up with batches from the start, so
  every rank takes ``ceil(batches / ranks)`` steps. Ranks never differ; the top-up repeats a
  few batches, which the table shows.
"""

from __future__ import annotations

from cachedoctor.layouts.samplers.interface import Buckets, RankSplit, Sampler, ceil_div


class KohyaSampler(Sampler):
    name = "kohya"
    commit = "48d368f"

    def split(self, buckets: Buckets, world_size: int, batch_size: int) -> RankSplit:
        listed = buckets.listed if buckets.listed is not None else buckets.counts
        batches = {b: ceil_div(n, batch_size) for b, n in listed.items() if n > 0}
        total = sum(batches.values())
        steps = ceil_div(total, world_size)
        notes: tuple[str, ...] = ()
        if steps * world_size != total:
            notes = (
                f"accelerate repeats {steps * world_size - total} batch(es) from the start of the epoch "
                "so every rank takes the same number of steps",
            )
        # the batches of all buckets are shuffled together before dealing: no bucket has a share per rank
        return RankSplit(self.name, (steps,) * world_size, {}, {}, None, notes)
