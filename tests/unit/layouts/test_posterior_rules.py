"""Each layout says whether its trainer caches the posterior's mode or a sample (issue 26:
"mode-versus-sample per trainer"), read from the golden caches its own code wrote, so
``repair --posterior trainer`` draws where the trainer draws."""

from __future__ import annotations

from pathlib import Path

from cachedoctor.layouts import LAYOUTS
from cachedoctor.layouts.interface import Expected

TRAINERS = Path(__file__).resolve().parents[3] / "fixtures" / "trainers"


def test_ai_toolkit_caches_a_sample() -> None:  # StableDiffusion.encode_images: latent_dist.sample()
    cache = TRAINERS / "aitoolkit" / "sd15" / "images" / "_latent_cache"
    latent = next(iter(sorted(cache.glob("a_land_*.safetensors"))))
    spec, why = LAYOUTS["ai-toolkit"].recompute_spec(
        str(latent), Expected(str(latent), str(cache.parent / "a_land.png")), None
    )
    assert why is None and spec is not None and spec.posterior == "sample"


def test_musubi_z_image_caches_the_mode() -> None:  # zimage_cache_latents.py: latent_dist.mode()
    cache = TRAINERS / "musubi" / "zi" / "cache"
    latent = cache / "a_wide_0200x0120_zi.safetensors"
    spec, why = LAYOUTS["musubi"].recompute_spec(
        str(latent), Expected(str(latent), str(cache.parent / "images" / "a_wide.png")), None
    )
    assert why is None and spec is not None and spec.posterior == "mode"
