"""Scale to cover the target, centre-crop: for entries whose trainer recorded only the latent
size (a manifest). LANCZOS, as PIL users do by default for downscaling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachedoctor.layouts.prepare.interface import Prepared, image_input, open_rgb, target_size, to_pixels

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec


def prepare(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    from PIL import Image

    tw, th = target_size(spec, downscale)
    image = open_rgb(image_input(spec, data))
    ow, oh = image.size
    scale = max(tw / ow, th / oh)
    rw, rh = max(tw, round(ow * scale)), max(th, round(oh * scale))
    image = image.resize((rw, rh), Image.Resampling.LANCZOS)
    left, top = (rw - tw) // 2, (rh - th) // 2
    image = image.crop((left, top, left + tw, top + th))
    return Prepared(to_pixels(image), {})
