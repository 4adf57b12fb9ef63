"""The names SimpleTuner gives its cache entries, one rule for a local dataset and an ``aws`` one.

- a VAE latent: ``sha256(<image stem>).pt`` (``caching/vae.py:678-703``; ``hash_filenames`` is
  always on, ``factory.py:4224``), or the pre-2024 ``<stem>.pt``;
- a text embed: ``<md5(caption)>-<model_family>.pt`` in the text embeds' cache folder.

Why a module of its own: both ``simpletuner.py`` (local datasets) and ``_simpletuner_aws.py``
(datasets in a bucket, which ``simpletuner.py`` plans through) name entries by these rules, and
neither may import the other back.
"""

from __future__ import annotations

import hashlib
import os


def latent_name(image_stem: str) -> str:
    """The file name of the VAE latent of the image whose stem is ``image_stem``."""
    return hashlib.sha256(image_stem.encode()).hexdigest() + ".pt"


def embed_path(cache_dir: str, caption: str, family: str) -> str:
    """Where the text embed of ``caption`` for ``family`` lives in ``cache_dir``."""
    return os.path.join(cache_dir, f"{hashlib.md5(caption.encode()).hexdigest()}-{family}.pt")


__all__ = ["embed_path", "latent_name"]
