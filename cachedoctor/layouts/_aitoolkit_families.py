"""ostris/ai-toolkit's model families as its latent caching treats them (commit 27a03a9): per
``model.arch``, the bucket divisibility its datasets round to, the latent's channels and scaling,
posterior sample or mean, and whether cachedoctor can recompute such a latent
(``recompute_why`` ``None``: a diffusers 2D ``AutoencoderKL`` with the scalar transform reproduces
ai-toolkit's ``encode_images``; otherwise why not and what to run instead). Split from
``_aitoolkit_config`` (the job YAML), which resolves each dataset's family from here.
"""

from __future__ import annotations

from dataclasses import dataclass

_SD = "StableDiffusion.encode_images (stable_diffusion_model.py:2534-2575)"
_PIXEL = "pixel-space model (FakeVAE / identity encode): the cached 'latent' is the prepared image; rewrite it from the preparer's pixels, no encoder"
_WAN = "a 3D (Wan/Qwen-Image) VAE with per-channel latents_mean/std normalisation, not a 2D AutoencoderKL with a scalar transform; recompute with that model's own encode"
_FLUX2 = "Flux.2 VAE: patchified latents normalised by the VAE's BatchNorm running stats; recompute with that model's own encode"


@dataclass(frozen=True)
class Family:
    """One model arch as ai-toolkit caches its latents. ``scaling_factor``/``shift_factor``: the released
    VAE's config values (ai-toolkit reads them from the loaded VAE's config) applied as
    ``scaling * (z - shift)``; ``bucket_divisibility``: ``get_bucket_divisibility()`` with the real VAE."""

    arch: str
    bucket_divisibility: int
    latent_channels: int | None = None
    downscale: int | None = 8
    scaling_factor: float | None = None
    shift_factor: float | None = 0.0
    posterior: str = "sample"  # latent_dist.sample() (torch's RNG), "mean", or "none" (no encoder)
    recompute_why: str | None = None  # None: a diffusers 2D AutoencoderKL + scalar transform reproduces it
    source: str = _SD


def _ext(arch: str, div: int, why: str | None, source: str, posterior: str = "sample", ch: int | None = None) -> Family:
    return Family(arch, div, ch, 8, None, None, posterior, why, source)


_BASE = "BaseModel.encode_images (toolkit/models/base_model.py:1134-1175), divisibility"
_FAMILY_LIST = [
    # StableDiffusion (stable_diffusion_model.py); get_bucket_divisibility l.289-296 with a 4-block VAE
    Family("sd1", 16, 4, 8, 0.18215),
    Family("sd2", 16, 4, 8, 0.18215),
    Family("sdxl", 16, 4, 8, 0.13025),
    Family("ssd", 16, 4, 8, 0.13025),
    Family("vega", 16, 4, 8, 0.13025),
    Family("pixart", 16, 4, 8, 0.18215),
    Family("pixart_sigma", 16, 4, 8, 0.13025),
    Family("auraflow", 16, 4, 8, 0.13025),
    Family("sd3", 32, 16, 8, 1.5305, 0.0609),
    Family("flux", 32, 16, 8, 0.3611, 0.1159),
    Family("lumina2", 16, 16, 8, 0.3611, 0.1159),
    # extensions_built_in/diffusion_models/* on BaseModel.encode_images: the same transform
    _ext("flux_kontext", 16, None, f"{_BASE} flux_kontext.py:70", ch=16),
    _ext("chroma", 32, None, f"{_BASE} chroma_model.py:94", ch=16),
    _ext("hidream", 16, None, f"{_BASE} hidream_model.py:84", ch=16),
    _ext("hidream_e1", 16, None, f"{_BASE} hidream_model.py:84", ch=16),
    _ext("omnigen2", 16, None, f"{_BASE} omnigen2/__init__.py:63", ch=16),
    _ext("f-lite", 16, None, f"{_BASE} f_light.py:63"),
    _ext("zimage", 16, None, f"{_BASE} z_image.py:81", ch=16),
    _ext("flex2", 16, None, f"{_BASE} extensions_built_in/flex2/flex2.py:88", ch=16),
    _ext("cogview4", 8, None, f"{_BASE} base_model.py:272 (toolkit/models/cogview4.py)"),
    _ext("boogu_image", 16, None, "boogu_image.py:143,388 ((z - shift) * scaling)"),
    _ext("boogu_image_edit", 16, None, "boogu_image.py:143,388 ((z - shift) * scaling)"),
    # pixel space, and encoders that are not a 2D AutoencoderKL with a scalar transform
    _ext("chroma_radiance", 32, _PIXEL, "chroma_radiance_model.py:95,232", "none", 3),
    _ext("zeta_chroma", 32, _PIXEL, "zeta_chroma_model.py:66,173", "none", 3),
    _ext("zimage_l2p", 16, _PIXEL, "z_image_l2p_model.py:501", "none", 3),
    _ext("hidream_o1", 32, _PIXEL, "hidream_o1_model.py:152,272", "none", 3),
    _ext("prx_pixel", 16, _PIXEL, "prx_pixel_t2i.py:110", "none", 3),
    _ext("flux2", 16, _FLUX2, "flux2_model.py:88,522"),
    _ext("flux2_klein_4b", 16, _FLUX2, "flux2_model.py:88,522"),
    _ext("flux2_klein_9b", 16, _FLUX2, "flux2_model.py:88,522"),
    _ext("ernie_image", 32, _FLUX2, "ernie_image.py:71,210"),
    _ext("qwen_image", 32, _WAN, "qwen_image.py:84,432", ch=16),
    _ext("qwen_image_edit", 32, _WAN, "qwen_image.py:84,432", ch=16),
    _ext("qwen_image_edit_plus", 32, _WAN, "qwen_image.py:84,432", ch=16),
    _ext("krea2", 16, _WAN, "krea2.py:226,777", ch=16),
    _ext("nucleus_image", 32, _WAN, "nucleus_image_model.py:73,217", ch=16),
    _ext("anima", 32, _WAN, "anima.py:246,363", ch=16),
    _ext("wan21", 16, _WAN, "toolkit/models/wan21/wan21.py:335,618"),
    _ext("wan21_i2v", 16, _WAN, "toolkit/models/wan21/wan21.py:335,618"),
    _ext("wan22_14b", 16, _WAN, "wan22_14b_model.py:248; wan21.py:618"),
    _ext("wan22_14b_i2v", 16, _WAN, "wan22_14b_model.py:248; wan21.py:618"),
    _ext("wan22_5b", 32, _WAN, "wan22_5b_model.py:117; wan21.py:618"),
    _ext("ideogram4", 16, "the encoder's mean, patchified, its own shift/scale", "ideogram4.py:207,556", "mean"),
    _ext("mageflow", 16, "its own VAE encode (128 channels, 16x)", "mageflow.py:149,573"),
    _ext("mageflow_edit", 16, "its own VAE encode (128 channels, 16x)", "mageflow.py:149,573"),
    _ext("ltx2", 32, "the LTX-2 video/audio VAE", "ltx2.py:243,570"),
    _ext("ltx2.3", 32, "the LTX-2 video/audio VAE", "ltx2.py:243,570"),
    _ext("ltx2.5", 32, "the LTX-2 video/audio VAE", "ltx2.py:243,570"),
    _ext("minimax_h3", 32, "its own video VAE bundle", "minimax_h3.py:211,741"),
    _ext("minimax_h3_ref2va", 32, "its own video VAE bundle", "minimax_h3.py:211,741"),
]
FAMILIES: dict[str, Family] = {f.arch: f for f in _FAMILY_LIST}


__all__ = ["FAMILIES", "Family"]
