"""kohya-ss/musubi-tuner: an image prepared as musubi's latent caching prepares it, so a recomputed
Z-Image latent equals the one musubi wrote (read at commit 30c658c, paths below ``src/musubi_tuner/``).

* Open: ``ImageDirectoryDatasource.get_image_data`` (``dataset/datasources.py:221-226``): PIL, kept
  as it is when RGB or RGBA, any other mode converted to RGB (palette, grey, CMYK, 16-bit). No EXIF
  rotation. An RGBA image is resized with its alpha (PIL's LANCZOS weighs colour by alpha; OpenCV's
  INTER_AREA does not) and the alpha is dropped afterwards (``cache_latents.py:295-302``,
  ``zimage_cache_latents.py:39-40``).
* Resize: ``resize_image_to_bucket`` (``dataset/media_utils.py:101-137``, ``_musubi_buckets.resize_plan``):
  nothing when the image is the bucket's size; else scaled to cover, sides ``int(x * scale + 0.5)``,
  PIL ``LANCZOS`` when the scale is above 1, OpenCV ``INTER_AREA`` otherwise; centre crop
  ``(size - bucket) // 2``.
* Normalise: ``preprocess_contents_zimage`` (``zimage_cache_latents.py:25-47``): ``x.float() / 127.5 - 1``
  on the uint8 pixels, float32, ``[3, H, W]``.

The bucket is ``spec.latent_hw * downscale``; musubi records nothing beside the latent but the
file's metadata (``_musubi_rules.latent_metadata``), so ``recorded`` is empty. Clips are refused:
a window's frames go through a 3D VAE this repair does not run.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cachedoctor.layouts._musubi_buckets import resize_plan
from cachedoctor.layouts.prepare.interface import Prepared, image_input

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec

#: media_utils.py:34-55
VIDEO_SUFFIXES = (".mp4", ".webm", ".avi", ".mkv", ".mov", ".flv", ".wmv", ".m4v", ".mpg", ".mpeg")


def bucket_array(image: Any, bucket: tuple[int, int]) -> Any:
    """``image`` (PIL, RGB or RGBA) resized and cropped to ``bucket`` ``(W, H)`` as
    ``resize_image_to_bucket`` does: uint8 ``[H, W, C]``, the image's channels."""
    import numpy as np

    plan = resize_plan(image.size, bucket)
    if plan.resample == "none":
        return np.array(image)
    if plan.resample == "lanczos":
        from PIL import Image

        array = np.array(image.resize(plan.resized, Image.Resampling.LANCZOS))
    else:
        from cachedoctor.extras import import_cv2

        cv2 = import_cv2("musubi-tuner's resize")  # the [encoders] extra: only when a musubi entry is recomputed

        array = cv2.resize(np.array(image), plan.resized, interpolation=cv2.INTER_AREA)
    left, top = plan.crop
    return array[top : top + bucket[1], left : left + bucket[0]]


def prepare(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    import numpy as np
    import torch
    from PIL import Image

    from cachedoctor.repair.model import NotRewritable

    if spec.latent_hw is None:
        raise NotRewritable("the expected latent size is unknown")
    if os.path.splitext(spec.source)[1].lower() in VIDEO_SUFFIXES:
        raise NotRewritable("musubi-tuner encodes clip windows with a 3D video VAE, which this repair does not run")
    h, w = spec.latent_hw
    bucket = (w * downscale, h * downscale)
    with Image.open(image_input(spec, data)) as opened:
        image = opened if opened.mode in ("RGB", "RGBA") else opened.convert("RGB")
        array = bucket_array(image, bucket)
    if array.shape[0] != bucket[1] or array.shape[1] != bucket[0]:
        raise NotRewritable(f"the image does not cover its bucket {bucket[0]}x{bucket[1]} once resized")
    pixels = torch.from_numpy(np.ascontiguousarray(array[..., :3])).permute(2, 0, 1).float() / 127.5 - 1.0
    return Prepared(pixels, {})
