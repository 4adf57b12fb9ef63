"""SimpleTuner: resize to the bucket metadata's ``intermediary_size``, crop at its
``crop_coordinates`` (both recorded in ``aspect_ratio_bucket_metadata_<id>.json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.layouts.prepare import cover
from cachedoctor.layouts.prepare.interface import Prepared, open_rgb, target_size, to_pixels

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec


def prepare(spec: RecomputeSpec, downscale: int) -> Prepared:
    from PIL import Image

    if spec.crop is None or spec.resize is None:
        return cover.prepare(spec, downscale)
    tw, th = target_size(spec, downscale)
    image = open_rgb(spec.source)
    rw, rh = spec.resize
    top, left = spec.crop
    image = image.resize((rw, rh), Image.Resampling.LANCZOS)
    h, w = spec.latent_hw or (0, 0)
    cw, ch = w * 8, h * 8  # the recorded crop is in the trainer's 8x pixel space
    image = image.crop((left, top, left + cw, top + ch))
    if (cw, ch) != (tw, th):  # an encoder of another downscale (tests' tiny VAEs) gets the crop resized
        image = image.resize((tw, th), Image.Resampling.LANCZOS)
    return Prepared(to_pixels(image), {})
