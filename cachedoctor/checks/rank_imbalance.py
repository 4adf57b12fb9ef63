"""``rank-imbalance`` and ``dropped-bucket``: how the trainer's sampler deals the buckets to ranks.

A multi-GPU run stays in step only while every rank takes the same number of steps per epoch.
With aspect buckets, each rank's share of each bucket is cut into batches on its own, and the
remainders differ: one rank runs out of batches first and waits at a collective the others
never reach, until NCCL's watchdog kills the run (NVlabs/Sana issue #206, multi-scale training
on several GPUs, second epoch). Every file of such a cache is healthy; the distribution is what
hangs the run, and it is known before the run from the buckets, the world size and the batch
size. The trainers' rules are modelled in ``layouts/samplers/`` (one module per trainer).

Two kinds, because they gate differently: ``rank-imbalance`` (error) stops a CI gate before a
run that would hang; ``dropped-bucket`` (warning) names images the trainer never trains.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cachedoctor.checks.interface import Check, RunView
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:
    from cachedoctor.layouts.samplers.interface import Buckets, RankSplit

_SHOWN = 5  # buckets named in a message; the details hold them all


_last: tuple[RunView, list[tuple[Buckets, RankSplit, bool]]] | None = None


def simulate(run: RunView) -> list[tuple[Buckets, RankSplit, bool]]:
    """Each dataset of the run, its epoch per rank, and whether the trainer's own model was used
    (computed once per run: both kinds read it)."""
    global _last
    if _last is not None and _last[0] is run:
        return _last[1]
    from cachedoctor.layouts.samplers import sampler_for

    out = []
    for buckets in run.buckets:
        if not buckets.world_size or not buckets.batch_size:
            continue
        sampler, own = sampler_for(buckets.trainer)
        out.append((buckets, sampler.split(buckets, buckets.world_size, buckets.batch_size), own))
    _last = (run, out)
    return out


def _names(items: list[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _whose(split: RankSplit, own: bool) -> str:
    return f"{split.sampler}'s sampler" if own else f"trainer unknown, modelled as {split.sampler}'s sampler"


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
        "on every rank. Needs the world and batch size: --world-size and --batch-size, or the "
        "trainer's config (SimpleTuner config.json num_processes and train_batch_size, kohya's "
        "dataset TOML batch_size)."
    )
    repair = (
        "none: no cache file is wrong. The message says what to change: the batch size or the "
        "number of GPUs (so that each bucket's share is a whole number of batches on every "
        "rank), the buckets named (drop or fill them), or the trainer option that evens the "
        "ranks out."
    )

    def check_run(self, run: RunView) -> Iterable[Finding]:
        for buckets, split, own in simulate(run):
            details: dict[str, Any] = {
                "dataset": buckets.name,
                "trainer": split.sampler,
                "trainer_known": own,
                "world_size": buckets.world_size,
                "batch_size": buckets.batch_size,
                "steps": list(split.steps),
            }
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
                f"bucket(s) {_names(responsible)} split unevenly"
                if responsible
                else "the epochs start at different buckets"
            )
            remedy = "; or " + type_remedy(split.sampler) if type_remedy(split.sampler) else ""
            yield self.finding(
                buckets.path,
                f"{buckets.world_size} ranks at batch {buckets.batch_size} ({_whose(split, own)}): ranks take "
                f"{min(steps)} to {max(steps)} steps per epoch; {where}. The short rank waits at a "
                "collective the others never reach (NCCL timeout): change the batch size or the GPU "
                f"count, or drop or fill those buckets{remedy}",
                **details,
            )


def type_remedy(trainer: str) -> str:
    from cachedoctor.layouts.samplers import SAMPLERS

    found = SAMPLERS.get(trainer)
    return found.remedy if found is not None else ""


class DroppedBucket(Check):
    kind = "dropped-bucket"
    severity = Severity.WARNING
    fix = Fix.NONE
    summary = "the trainer's sampler never trains some images of a bucket (too small for its batches)"
    why = (
        "Samplers drop what does not fill a batch: SimpleTuner deletes a bucket smaller than "
        "one batch (with minimum_image_size set); Sana's multi-scale loader drops each rank's "
        "partial batches (drop_last), and since it reads its ranges in order, the same images "
        "every epoch, plus the items past the ranks' equal ranges. Those images were cached and "
        "never train, and the log says so once, if at all."
    )
    repair = (
        "none: the cache is fine. Add images to the bucket, lower the batch size, or move "
        "the images to a bucket that fills (a different crop or resolution)."
    )

    def check_run(self, run: RunView) -> Iterable[Finding]:
        for buckets, split, own in simulate(run):
            if not split.dropped:
                continue
            names = [f"{b} ({n})" for b, n in split.dropped.items()]
            total = sum(split.dropped.values())
            yield self.finding(
                buckets.path,
                f"{total} image(s) never train ({_whose(split, own)}, batch {buckets.batch_size} on "
                f"{buckets.world_size} rank(s)): bucket(s) {_names(names)}; add images, lower the batch "
                "size, or drop those buckets",
                dataset=buckets.name,
                trainer=split.sampler,
                trainer_known=own,
                world_size=buckets.world_size,
                batch_size=buckets.batch_size,
                dropped=dict(split.dropped),
            )
