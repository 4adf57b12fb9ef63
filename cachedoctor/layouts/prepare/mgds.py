"""OneTrainer (mgds): the image scaled and cropped to the aggregate's ``crop_resolution``;
``original_resolution`` and ``crop_offset`` recorded beside the latent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.layouts.prepare.interface import Prepared, open_rgb, target_size, to_pixels

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec


def prepare(spec: RecomputeSpec, downscale: int) -> Prepared:
    from PIL import Image

    tw, th = target_size(spec, downscale)
    image = open_rgb(spec.source)
    ow, oh = image.size
    scale = max(tw / ow, th / oh)
    rw, rh = max(tw, round(ow * scale)), max(th, round(oh * scale))
    image = image.resize((rw, rh), Image.Resampling.LANCZOS)
    left, top = (rw - tw) // 2, (rh - th) // 2
    image = image.crop((left, top, left + tw, top + th))
    recorded = {"original_resolution": [oh, ow], "crop_offset": [top, left]}
    return Prepared(to_pixels(image), recorded)
