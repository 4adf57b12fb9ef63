"""Sana's multi-scale loader: ``DistributedRangedSampler`` then ``AspectRatioBatchSampler``.

Read in NVlabs/Sana: ``diffusion/utils/data_sampler.py`` (commit f57f6c4) and
``train_scripts/train.py`` (commit 0bcf2bf); ``DistributedRangedSampler`` in
``diffusion/data/wids/wids.py`` as the fork SUP3RMASS1VE/Sana (0393e0c) carries it (the index
holds no NVlabs copy of that file). Rules:

- Sharding before batching (``wids.py`` ``DistributedRangedSampler.__init__``): rank ``r``
  takes the dataset positions ``[r * c, (r + 1) * c)`` with ``c = items // ranks``, in order;
  the last ``items % ranks`` items are never trained.
- Batching per rank (``data_sampler.py`` ``AspectRatioBatchSampler.__iter__``): each item goes
  to its closest aspect ratio's bucket; a bucket that reaches the batch size is yielded; at the
  end the partial buckets are yielded, or dropped with ``drop_last``, which ``train.py`` sets for
  multi-scale training (``if config.model.multi_scale: drop_last = True``).
- Nothing is shuffled: the ranges are read in order, so the images a rank leaves in a partial
  bucket are the same ones every epoch, and never train (``dropped``).
- No padding: the loader is not passed to ``accelerator.prepare`` (only the model, optimizer
  and scheduler are), so nothing evens the ranks out. A rank's epoch is the sum over buckets of
  ``floor(its items in the bucket / batch)``, and ranks whose ranges mix the buckets differently
  take different numbers of steps: the hang of NVlabs/Sana issue #206.

It is also cachedoctor's model for a trainer it cannot name (a manifest, a bare cache folder):
"shard the items, then bucket each rank's share" is the common PyTorch pattern (a
``DistributedSampler`` under a bucketing batch sampler), and the one that hangs. The dataset
order is taken to be the order cachedoctor listed the items in (``Buckets.sequence``); without
it, each bucket's items are taken to be spread evenly over the ranks.
"""

from __future__ import annotations

from cachedoctor.layouts.samplers.interface import Buckets, RankSplit, Sampler


class SanaSampler(Sampler):
    name = "sana"
    commit = "f57f6c4"
    remedy = "make every bucket's share of each rank a multiple of the batch size"

    def split(self, buckets: Buckets, world_size: int, batch_size: int) -> RankSplit:
        drop_last = bool(buckets.options.get("drop_last", True))
        order = list(buckets.counts)
        per_rank = self._per_rank(buckets, order, world_size)
        by_bucket: dict[str, tuple[int, ...]] = {}
        dropped: dict[str, int] = {}
        for i, b in enumerate(order):
            held = [counts[i] for counts in per_rank]
            if drop_last:
                by_bucket[b] = tuple(n // batch_size for n in held)
                left = sum(n % batch_size for n in held)
            else:
                by_bucket[b] = tuple(-(-n // batch_size) for n in held)
                left = 0
            never = left + buckets.counts[b] - sum(held)  # and the tail past the last whole range
            if never:  # the ranges are read in order, unshuffled: the same images every epoch
                dropped[b] = never
        steps = tuple(sum(by_bucket[b][r] for b in order) for r in range(world_size))
        notes = []
        tail = buckets.images - sum(sum(c) for c in per_rank)
        if tail:
            notes.append(f"the last {tail} item(s) in dataset order fall past the ranks' equal ranges and never train")
        return RankSplit(self.name, steps, by_bucket, dropped, None, tuple(notes))

    @staticmethod
    def _per_rank(buckets: Buckets, order: list[str], world_size: int) -> list[list[int]]:
        """Each rank's items per bucket (index as in ``order``)."""
        sequence = buckets.sequence
        if not sequence:
            return _spread(buckets, order, world_size)
        chunk = len(sequence) // world_size
        out = []
        for r in range(world_size):
            counts = [0] * len(order)
            for i in sequence[r * chunk : (r + 1) * chunk]:
                counts[i] += 1
            out.append(counts)
        return out


def _spread(buckets: Buckets, order: list[str], world_size: int) -> list[list[int]]:
    """Each rank's items per bucket when the dataset order is unknown: every bucket as evenly
    over the ranks as it goes, its remainder dealt on from where the last bucket's stopped, so
    that each rank holds the same share of the whole as a contiguous range would (the ranges are
    equal: ``items // ranks`` each, the last ``items % ranks`` items never train). An imbalance
    this most even dealing shows is not an artefact of a guessed order."""
    out = [[0] * len(order) for _ in range(world_size)]
    extra_at: list[int | None] = [None] * world_size  # where each rank last got a remainder item
    start = 0
    for i, b in enumerate(order):
        q, extra = divmod(buckets.counts[b], world_size)
        for r in range(world_size):
            out[r][i] = q
        for k in range(extra):
            r = (start + k) % world_size
            out[r][i] += 1
            extra_at[r] = i
        start = (start + extra) % world_size
    chunk = sum(buckets.counts[b] for b in order) // world_size
    for r in range(world_size):
        at = extra_at[r]
        if sum(out[r]) > chunk and at is not None:
            out[r][at] -= 1  # past the equal range: the tail that never trains
    return out
