"""Tiny real models for encoder tests: built by ``fixtures/builders/tiny_models.py`` (shared with
the benchmarks); these names stay importable from here."""

from __future__ import annotations

from fixtures.builders.tiny_models import (  # noqa: F401
    CLIP_HIDDEN,
    CLIP_MAX_LENGTH,
    CLIP_PROJECTION,
    T5_HIDDEN,
    T5_MAX_LENGTH,
    build_tiny_clip,
    build_tiny_t5,
    build_tiny_vae,
    ldm_vae_state_dict,
)
