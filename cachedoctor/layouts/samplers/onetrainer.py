"""OneTrainer's multi-GPU loader: mgds ``AspectBatchSorting`` at the global batch, then
``DistributedSampler`` (OneTrainer 23df383, mgds 3a6994a).

OneTrainer runs on several GPUs at this commit (``multi_gpu`` with ``device_indexes``:
``modules/trainer/MultiTrainer.py`` spawns one process per device). Rules, as read:

- Batching before sharding (``modules/dataLoader/mixin/DataLoaderText2ImageMixin.py``
  ``_output_modules``): with the latent cache on, ``AspectBatchSorting`` is built with
  ``batch_size = config.batch_size * world_size`` (the *global* batch), and a
  ``DistributedSampler`` follows it when ``world_size > 1``.
- ``AspectBatchSorting.__shuffle`` (mgds ``pipelineModules/AspectBatchSorting.py``): items are
  sorted into buckets by ``crop_resolution``; each bucket makes ``floor(items / global batch)``
  batches, the batches of all buckets are shuffled together and each bucket's remainder
  (``items % global batch``) is dropped. The shuffle is seeded by the epoch (``_get_rand(
  current_variation)``, and ``LoadingPipeline.start_next_epoch`` sets the variation to the epoch),
  so a different remainder sits out each epoch; but a bucket with fewer images than one global
  batch makes no batch at all and never trains (``dropped``) — on W GPUs a bucket needs
  ``batch_size * W`` images, where one GPU needs ``batch_size``.
- ``DistributedSampler`` (mgds ``pipelineModules/DistributedSampler.py``): rank ``r`` takes
  positions ``r, r + W, r + 2W, ...`` of that list, ``length // W`` items; every global batch is
  a whole number of rows of W, so each rank takes ``batch_size`` items of each global batch, and
  ``TrainDataLoader`` (``drop_last=True`` at the local batch size) cuts them into one step.
  Every rank takes the same number of steps, ``sum(floor(items / (batch_size * W)))``: OneTrainer's
  ranks never fall out of step; the risk is images that never train.
- Concept ``balancing`` (``VariationSorting``: ``REPEATS`` lists ``floor(images * balancing)``
  per epoch, ``SAMPLES`` a fixed number) changes the per-epoch counts; the model counts each
  image once (balancing 1, OneTrainer's default).
"""

from __future__ import annotations

from cachedoctor.layouts.samplers.interface import Buckets, RankSplit, Sampler


class OneTrainerSampler(Sampler):
    name = "onetrainer"
    commit = "23df383 (mgds 3a6994a)"

    def dropped_rule(self, world_size: int, batch_size: int) -> str:
        return (
            f"OneTrainer cuts each bucket into global batches of batch x GPUs = {batch_size * world_size}; "
            "a smaller bucket makes none"
        )

    def split(self, buckets: Buckets, world_size: int, batch_size: int) -> RankSplit:
        global_batch = batch_size * world_size
        by_bucket = {b: (n // global_batch,) * world_size for b, n in buckets.counts.items() if n > 0}
        steps = sum(s[0] for s in by_bucket.values())
        dropped = {b: n for b, n in buckets.counts.items() if 0 < n < global_batch}
        left = sum(n % global_batch for n in buckets.counts.values() if n >= global_batch)
        notes: list[str] = []
        if left:
            notes.append(
                f"each epoch {left} image(s) of fuller buckets sit out (each bucket's remainder below the "
                f"global batch of {global_batch}, drawn afresh every epoch)"
            )
        return RankSplit(self.name, (steps,) * world_size, by_bucket, dropped, None, tuple(notes))
