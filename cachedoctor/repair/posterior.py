"""Which latent a recompute writes: the posterior's mode, or a sample drawn reproducibly.

A VAE encodes an image into a Gaussian; trainers cache either its mean (OneTrainer's mgds,
musubi-tuner's Z-Image) or a sample (SimpleTuner, sd-scripts and ai-toolkit call
``latent_dist.sample()``). ``--posterior trainer`` (the default) does what the entry's trainer
does, as its layout records (``RecomputeSpec.posterior``); where the layout does not say (a
manifest), or the encoder reports no std to draw from, it writes the mean. ``--posterior mode``
always writes the mean; ``--posterior sample`` always draws. A draw is ``mean + std * noise``
with the noise from a generator seeded by ``--seed`` and the entry's path inside its cache
root: a resumed or repeated repair writes the same sample, and two entries never share their
noise. No recompute can equal a sample the trainer drew with its own random state; a sample
matches the statistics of such a cache, not its bits.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Models:
    """The encoder specs a repair recomputes with, and how latents are drawn (plain values: they
    travel to the worker processes)."""

    encoders: tuple[str, ...]
    posterior: str = "trainer"  # "trainer" (as the layout says), "mode" or "sample"
    seed: int = 0


def item_seed(seed: int, path: str, root: str) -> int:
    """A 64-bit seed for one entry: ``seed`` and the entry's path relative to its cache root."""
    rel = os.path.relpath(path, root) if root else path
    return int.from_bytes(hashlib.sha256(f"{seed}\0{rel}".encode()).digest()[:8], "little") & (2**63 - 1)


def chosen(models: Models, trainer: str, has_std: bool) -> str:
    """``"mode"`` or ``"sample"``: what one entry gets, given what its trainer caches
    (``trainer``: ``"mode"``, ``"sample"`` or ``""``, unknown) and whether the encoder reports a std."""
    if models.posterior != "trainer":
        return models.posterior
    return "sample" if trainer == "sample" and has_std else "mode"


def draw(models: Models, mean: Any, std: Any, path: str, root: str, trainer: str = "") -> Any:
    """The latent to write for one entry: ``mean`` (mode), or ``mean + std * noise`` (sample)."""
    if chosen(models, trainer, std is not None) == "mode":
        return mean
    import torch

    generator = torch.Generator().manual_seed(item_seed(models.seed, path, root))
    noise = torch.randn(mean.shape, generator=generator, dtype=torch.float32)
    return mean + std * noise
