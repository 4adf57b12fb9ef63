"""Which latent a recompute writes: the posterior's mode, or a sample drawn reproducibly.

A VAE encodes an image into a Gaussian; trainers cache either its mean (mgds' default) or a
sample (SimpleTuner and sd-scripts call ``latent_dist.sample()``). ``--posterior mode`` (the
default) writes the mean: the same bytes on every run and every machine. ``--posterior sample``
writes ``mean + std * noise`` with the noise drawn from a generator seeded by ``--seed`` and the
entry's path inside its cache root: a resumed or repeated repair writes the same sample, and two
entries never share their noise. No recompute can equal a sample the trainer drew with its own
random state; ``sample`` matches the statistics of such a cache, not its bits.
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
    posterior: str = "mode"  # "mode" or "sample"
    seed: int = 0


def item_seed(seed: int, path: str, root: str) -> int:
    """A 64-bit seed for one entry: ``seed`` and the entry's path relative to its cache root."""
    rel = os.path.relpath(path, root) if root else path
    return int.from_bytes(hashlib.sha256(f"{seed}\0{rel}".encode()).digest()[:8], "little") & (2**63 - 1)


def draw(models: Models, mean: Any, std: Any, path: str, root: str) -> Any:
    """The latent to write for one entry: ``mean`` (mode), or ``mean + std * noise`` (sample)."""
    if models.posterior == "mode":
        return mean
    import torch

    generator = torch.Generator().manual_seed(item_seed(models.seed, path, root))
    noise = torch.randn(mean.shape, generator=generator, dtype=torch.float32)
    return mean + std * noise
