"""Make an entry again: the source image prepared the way the layout prepared it, encoded, and
written in the layout's own file shape.

A healthy peer in the same folder is the template: the new file has its container (bare tensor,
dict, npz), its keys in its order, its dtypes and its batch dimensions. Keys the repair knows
how to make are the latent (and kohya's flipped latent), the recorded sizes and crops (kohya
``original_size``/``crop_ltrb``, OneTrainer ``original_resolution``/``crop_offset``) and the
text encoder's outputs; a template with any other key makes the item fail with its name rather
than write a file the trainer would not accept. Loading the template and saving the file are
``torch_io.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cachedoctor.repair.model import NotRewritable, RecomputeSpec
from cachedoctor.repair.torch_io import as_recorded, cast, load_template, save_entries, serialize, torch_dtype


@dataclass(frozen=True)
class Prepared:
    """One image ready for the encoder, and where it was cut from (for the recorded crops)."""

    pixels: Any  # float32 [3, H, W] in [-1, 1]
    original: tuple[int, int]  # (W, H) of the source image
    resized: tuple[int, int]  # (W, H) after the resize, before the crop
    crop: tuple[int, int]  # (top, left) of the crop in the resized image
    size: tuple[int, int]  # (W, H) of the crop


def prepare_image(spec: RecomputeSpec, downscale: int) -> Prepared:
    """Resize and crop to ``latent_hw * downscale`` pixels: with the trainer's recorded resize
    and crop (SimpleTuner), else scaled to cover and centre-cropped (kohya, OneTrainer)."""
    import numpy as np
    import torch
    from PIL import Image

    if spec.latent_hw is None:
        raise NotRewritable("the expected latent size is unknown")
    h, w = spec.latent_hw
    tw, th = w * downscale, h * downscale
    with Image.open(spec.source) as opened:
        image = opened.convert("RGB")
    original = image.size
    if spec.crop is not None and spec.resize is not None:
        rw, rh = spec.resize
        top, left = spec.crop
        image = image.resize((rw, rh), Image.Resampling.LANCZOS)
        cw, ch = w * 8, h * 8  # the recorded crop is in the trainer's 8x pixel space
        image = image.crop((left, top, left + cw, top + ch))
        if (cw, ch) != (tw, th):
            image = image.resize((tw, th), Image.Resampling.LANCZOS)
        resized, crop, size = (rw, rh), (top, left), (cw, ch)
    else:
        scale = max(tw / original[0], th / original[1])
        rw, rh = max(tw, round(original[0] * scale)), max(th, round(original[1] * scale))
        image = image.resize((rw, rh), Image.Resampling.LANCZOS)
        left, top = (rw - tw) // 2, (rh - th) // 2
        image = image.crop((left, top, left + tw, top + th))
        resized, crop, size = (rw, rh), (top, left), (tw, th)
    array = np.asarray(image, dtype=np.uint8)
    pixels = torch.from_numpy(array.copy()).permute(2, 0, 1).float() / 127.5 - 1.0
    return Prepared(pixels, original, resized, crop, size)


def build_file(
    spec: RecomputeSpec,
    latent: Any = None,
    flipped: Any = None,
    prepared: Prepared | None = None,
    texts: dict[str, Any] | None = None,
) -> bytes:
    """The new file's bytes. ``latent`` is ``[C, h, w]`` (already scaled when the layout wants
    it); ``texts`` maps the text encoder's keys to one item's tensors (batch dim dropped)."""
    import torch

    fmt, shape = load_template(spec.template) if spec.template else (spec.container_format, None)
    if spec.writer == "bare-tensor" or (shape is not None and isinstance(shape, torch.Tensor)):
        if latent is None:
            raise NotRewritable("a bare-tensor entry needs a latent")
        return serialize(latent.to(torch_dtype(spec.dtype)).contiguous().clone(), fmt)
    keys = list(shape) if isinstance(shape, dict) else (list(spec.keys) or list(texts or {}))
    out: dict[str, Any] = {}
    for key in keys:
        like = shape.get(key) if isinstance(shape, dict) else None
        name = _for_bucket(key, spec) if spec.writer == "kohya-npz" else key
        out[name] = _value(name, like, spec, latent, flipped, prepared, texts or {})
    return save_entries(out, fmt)


def _value(
    key: str,
    like: Any,
    spec: RecomputeSpec,
    latent: Any,
    flipped: Any,
    prepared: Prepared | None,
    texts: dict[str, Any],
) -> Any:
    import torch

    if spec.role == "latent":
        if key == spec.key:
            return cast(latent, like, spec.dtype)
        if key.startswith("latents_flipped") and flipped is not None:
            return cast(flipped, like, spec.dtype)
        if prepared is not None:
            top, left = prepared.crop
            if key.startswith("original_size"):
                return as_recorded([prepared.original[0], prepared.original[1]], like)
            if key.startswith("crop_ltrb"):
                return as_recorded([left, top, left + prepared.size[0], top + prepared.size[1]], like)
            if key == "original_resolution":
                return as_recorded([prepared.original[1], prepared.original[0]], like)
            if key == "crop_offset":
                return as_recorded([top, left], like)
    elif key in texts:
        value = texts[key]
        if isinstance(like, torch.Tensor) and like.dim() == value.dim() + 1:
            value = value.unsqueeze(0)
        return cast(value, like, str(like.dtype).replace("torch.", "") if isinstance(like, torch.Tensor) else "float32")
    raise NotRewritable(f"the healthy peers hold {key!r}, which this repair cannot make; re-cache with the trainer")


def _for_bucket(key: str, spec: RecomputeSpec) -> str:
    """kohya keys carry the bucket (``latents_16x12``): a peer of another bucket is renamed."""
    import re

    if spec.latent_hw is None:
        return key
    h, w = spec.latent_hw
    return re.sub(r"_\d+x\d+$", f"_{h}x{w}", key)
