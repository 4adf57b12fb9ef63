"""How the trainer's sampler deals one run's buckets to its ranks, worked out once per run:
``rank-imbalance`` and ``dropped-bucket`` both read it. The trainers' rules are modelled in
``layouts/samplers/`` (one module per trainer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachedoctor.checks.interface import RunView

if TYPE_CHECKING:
    from cachedoctor.layouts.samplers.interface import Buckets, RankSplit

SHOWN = 5  # buckets named in a message; the details hold them all


_last: tuple[RunView, list[tuple[Buckets, RankSplit, bool]]] | None = None


def simulate(run: RunView) -> list[tuple[Buckets, RankSplit, bool]]:
    """Each dataset of the run, its epoch per rank, and whether the trainer's own model was used
    (computed once per run: both kinds read it)."""
    global _last
    if _last is not None and _last[0] is run:
        return _last[1]
    out = []
    for buckets in run.buckets:
        if not buckets.world_size or not buckets.batch_size:
            continue
        from cachedoctor.layouts.samplers.registry import sampler_for  # (a run of one GPU: never imported)

        sampler, own = sampler_for(buckets.trainer)
        out.append((buckets, sampler.split(buckets, buckets.world_size, buckets.batch_size), own))
    _last = (run, out)
    return out


def names(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


#: How messages name each modelled trainer (the details keep the model's key).
TITLES = {"simpletuner": "SimpleTuner", "sana": "Sana", "kohya": "sd-scripts", "onetrainer": "OneTrainer"}


def whose(split: RankSplit, own: bool) -> str:
    title = TITLES.get(split.sampler, split.sampler)
    return f"{title}'s sampler" if own else f"trainer unknown, modelled as {title}'s sampler"


def dropped_rule(trainer: str, world_size: int, batch_size: int) -> str:
    """The trainer's rule that drops a bucket, if its model states one."""
    from cachedoctor.layouts.samplers.registry import SAMPLERS

    found = SAMPLERS.get(trainer)
    return found.dropped_rule(world_size, batch_size) if found is not None else ""


def trainer_remedy(trainer: str) -> str:
    """The trainer option that evens its ranks out, if it has one."""
    from cachedoctor.layouts.samplers.registry import SAMPLERS

    found = SAMPLERS.get(trainer)
    return found.remedy if found is not None else ""


def run_details(buckets: Buckets, split: RankSplit, own: bool) -> dict[str, Any]:
    """What every run-level finding's details say of the run it simulated."""
    return {
        "dataset": buckets.name,
        "trainer": split.sampler,
        "trainer_known": own,
        "world_size": buckets.world_size,
        "batch_size": buckets.batch_size,
    }
