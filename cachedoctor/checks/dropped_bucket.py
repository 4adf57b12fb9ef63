"""``dropped-bucket``: images the trainer's sampler never trains, for not filling its batches.

A warning apart from ``rank-imbalance`` because it gates differently: the run does not hang,
but images that were cached never train, and the trainer's log says so once, if at all. It reads
the same per-run simulation (``rank_split.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.checks.interface import Check, RunView
from cachedoctor.checks.rank_split import dropped_rule, names, run_details, simulate, whose
from cachedoctor.findings import Finding, Fix, Severity


class DroppedBucket(Check):
    kind = "dropped-bucket"
    severity = Severity.WARNING
    fix = Fix.NONE
    summary = "the trainer's sampler never trains some images of a bucket (too small for its batches)"
    why = (
        "Samplers drop what does not fill a batch: SimpleTuner deletes a bucket smaller than "
        "one batch (with minimum_image_size set); Sana's multi-scale loader drops each rank's "
        "partial batches (drop_last), and since it reads its ranges in order, the same images "
        "every epoch, plus the items past the ranks' equal ranges; OneTrainer (mgds "
        "AspectBatchSorting) cuts each bucket into global batches of batch x GPUs and drops the "
        "rest, so on 8 GPUs at batch 4 a bucket of fewer than 32 images never trains, though it "
        "would on one GPU. Those images were cached and never train, and the log says so once, "
        "if at all."
    )
    repair = (
        "none: the cache is fine. Add images to the bucket, lower the batch size, or move "
        "the images to a bucket that fills (a different crop or resolution)."
    )

    found = (
        "Judged once per scan, about the run as a whole, from the same simulation as rank-imbalance "
        "(the buckets of the dataset, or the latent sizes read; the run's size from --world-size and "
        "--batch-size, else the trainer's config: SimpleTuner config.json and its accelerate_config, "
        "kohya's dataset TOML, OneTrainer's training config that names the cache). Only images that no "
        "epoch trains count: OneTrainer's per-epoch remainders are drawn afresh each epoch and are not "
        "reported, and none when the trainer is unknown (a cache without its dataset: Sana's model stands "
        "in for the rank balance, but most trainers shuffle, so which images never train is a guess). "
        "A quick scan is enough."
    )

    def check_run(self, run: RunView) -> Iterable[Finding]:
        for buckets, split, own in simulate(run):
            if not split.dropped or not own:
                continue  # an unknown trainer's model is a stand-in: most shuffle, so "never" would be a guess
            listed = [f"{b} ({n})" for b, n in split.dropped.items()]
            total = sum(split.dropped.values())
            world, batch = buckets.world_size or 1, buckets.batch_size or 1
            rule = dropped_rule(split.sampler, world, batch) if own else ""
            yield self.finding(
                buckets.path,
                f"{total} image(s) never train ({whose(split, own)}, batch {batch} on {world} rank(s)): "
                f"bucket(s) {names(listed)}{f' ({rule})' if rule else ''}; add images, lower the batch "
                "size, or drop those buckets",
                **run_details(buckets, split, own),
                dropped=dict(split.dropped),
            )
