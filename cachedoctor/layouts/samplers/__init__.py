"""Trainers' samplers, modelled on bucket counts: which rank takes how many steps per epoch.

:data:`SAMPLERS` maps a trainer name to its model; :func:`sampler_for` picks the model for a
layout, and falls back to :data:`DEFAULT` (Sana's rules: shard the items, then bucket each
rank's share, the common pattern and the one that hangs) for a trainer it cannot name.
"""

from __future__ import annotations

from cachedoctor.layouts.samplers.interface import Buckets, RankSplit, Sampler
from cachedoctor.layouts.samplers.kohya import KohyaSampler
from cachedoctor.layouts.samplers.onetrainer import OneTrainerSampler
from cachedoctor.layouts.samplers.sana import SanaSampler
from cachedoctor.layouts.samplers.simpletuner import SimpleTunerSampler

SAMPLERS: dict[str, Sampler] = {
    s.name: s for s in (SimpleTunerSampler(), KohyaSampler(), SanaSampler(), OneTrainerSampler())
}
DEFAULT = "sana"


def sampler_for(trainer: str | None) -> tuple[Sampler, bool]:
    """The model for ``trainer`` and whether it is the trainer's own (``False``: the default)."""
    found = SAMPLERS.get(trainer or "")
    return (found, True) if found is not None else (SAMPLERS[DEFAULT], False)


__all__ = ["DEFAULT", "SAMPLERS", "Buckets", "RankSplit", "Sampler", "sampler_for"]
