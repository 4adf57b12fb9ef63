"""``rank-imbalance``: the ranks of a multi-GPU run would take different numbers of steps.

A multi-GPU run stays in step only while every rank takes the same number of steps per epoch.
With aspect buckets, each rank's share of each bucket is cut into batches on its own, and the
remainders differ: one rank runs out of batches first and waits at a collective the others
never reach, until NCCL's watchdog kills the run (NVlabs/Sana issue #206, multi-scale training
on several GPUs, second epoch). Every file of such a cache is healthy; the distribution is what
hangs the run, and it is known before the run from the buckets, the world size and the batch
size. The trainers' rules are modelled in ``layouts/samplers/`` (one module per trainer);
``dropped-bucket`` reads the same simulation (``rank_split.py``) for images that never train.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cachedoctor.checks.interface import Check, RunView
from cachedoctor.checks.rank_split import names, run_details, simulate, trainer_remedy, whose
from cachedoctor.findings import Finding, Fix, Severity


class RankImbalance(Check):
    kind = "rank-imbalance"
    severity = Severity.ERROR
    fix = Fix.NONE
    summary = "the ranks of a multi-GPU run would take different numbers of steps per epoch (or the trainer refuses the split)"
    why = (
        "Each rank's share of each aspect bucket is cut into batches on its own; when the "
        "remainders differ, one rank runs out of batches first and waits at a collective (the "
        "gradient all-reduce, a broadcast) that the others never reach. The run hangs until "
        'NCCL\'s watchdog kills it: "Some NCCL operations have failed or timed out" '
        "(NVlabs/Sana issue #206: multi-scale training on several GPUs, in the second epoch; "
        "one GPU or a fixed size works). Every cache file is healthy: the distribution of the "
        "buckets over the ranks is what kills the run, and it is known before the run starts. "
        "SimpleTuner refuses to start instead when a bucket holds fewer images than one batch "
        "on every rank. kohya (accelerate evens the batches out) and OneTrainer (mgds batches "
        "each bucket at batch x GPUs before dealing every global batch to all ranks) never fall "
        "out of step; for them the risk is dropped-bucket. Needs the world and batch size: "
        "--world-size and --batch-size, or the trainer's config."
    )
    repair = (
        "none: no cache file is wrong. The message says what to change: the batch size or the "
        "number of GPUs (so that each bucket's share is a whole number of batches on every "
        "rank), the buckets named (drop or fill them), or the trainer option that evens the "
        "ranks out."
    )

    found = (
        "Judged once per scan, about the run as a whole, from the buckets: the dataset's (SimpleTuner's "
        "bucket indices with --config, kohya's computed buckets, OneTrainer's aggregate.pt crop "
        "resolutions, a manifest's shapes) or, without the dataset, the latent sizes the scan read in each "
        "cache folder (trainer unknown: modelled as Sana's sampler, and said so). Needs the run's size: "
        "--world-size and --batch-size (or world-size / batch-size in cachedoctor.toml), else the trainer's "
        "config: SimpleTuner config.json train_batch_size and num_processes (or the num_processes of the "
        "accelerate_config file it names), kohya's dataset TOML batch_size (the GPU count is the "
        "launcher's: pass --world-size), OneTrainer's training config that names the cache (its saved "
        "copy in workspace/<run>/config/, or a JSON beside the cache: batch_size, multi_gpu and "
        "device_indexes). The flags win. A quick scan is enough."
    )

    def check_run(self, run: RunView) -> Iterable[Finding]:
        for buckets, split, own in simulate(run):
            details: dict[str, Any] = {**run_details(buckets, split, own), "steps": list(split.steps)}
            if split.refused is not None:
                details["buckets"] = dict(buckets.counts)
                yield self.finding(
                    buckets.path, f"{split.refused}; lower the batch size or the GPU count, or add images", **details
                )
                continue
            if not split.uneven:
                continue
            responsible = split.responsible()
            details["later_epochs"] = [list(e) for e in split.epochs]
            details["by_bucket"] = {b: list(split.by_bucket[b]) for b in responsible}
            details["images"] = {b: buckets.counts[b] for b in responsible}
            details["notes"] = list(split.notes)
            steps = [s for e in (split.steps, *split.epochs) for s in e]
            where = (
                f"bucket(s) {names(responsible)} split unevenly"
                if responsible
                else "the epochs start at different buckets"
            )
            remedy = "; or " + trainer_remedy(split.sampler) if trainer_remedy(split.sampler) else ""
            yield self.finding(
                buckets.path,
                f"{buckets.world_size} ranks at batch {buckets.batch_size} ({whose(split, own)}): ranks take "
                f"{min(steps)} to {max(steps)} steps per epoch; {where}. The short rank waits at a "
                "collective the others never reach (NCCL timeout): change the batch size or the GPU "
                f"count, or drop or fill those buckets{remedy}",
                **details,
            )
