"""kohya-ss sd-scripts: the image prepared as sd-scripts' latent caching prepares it (read from
``library/train_util.py`` ``load_image``, ``trim_and_resize_if_required``,
``load_images_and_masks_for_caching`` and ``library/utils.py`` ``resize_image`` at commit 48d368f).

* The image is read with PIL and converted to RGB (RGBA when the dataset has ``alpha_mask``).
* It is resized to the bucket's ``resized_size`` (``spec.resize``; the image's own size: no
  resize). With no ``resize_interpolation`` set, sd-scripts uses OpenCV ``INTER_AREA`` when the
  image shrinks on both sides and PIL ``LANCZOS`` otherwise; a set one maps as sd-scripts maps it
  (``lanczos``/``box``: PIL; ``area``, ``bilinear``, ``bicubic``, ``nearest``: OpenCV).
* The overhang is cut evenly (``(size - bucket) // 2`` from the left/top; random_crop off).
* ``original_size`` is the image's ``[W, H]``; ``crop_ltrb`` is where the image, fitted inside the
  bucket, sits in it (``BucketManager.get_crop_ltrb``), not the window cut from the resized
  image; ``alpha_mask`` is the cut image's alpha / 255 (float32 ``[H, W]`` pixels).
* Pixels are ``ToTensor`` then ``Normalize([0.5], [0.5])``: ``(x / 255 - 0.5) / 0.5``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachedoctor.layouts._kohya_buckets import Bucketer, BucketRules, crop_ltrb
from cachedoctor.layouts.prepare.interface import Prepared, image_input

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec

STRIDE = 8  # sd-scripts' latent stride for every arch it buckets at 8x

_CV2 = {"area": "INTER_AREA", "nearest": "INTER_NEAREST_EXACT", "bilinear": "INTER_LINEAR", "linear": "INTER_LINEAR"}
_CV2.update({"bicubic": "INTER_CUBIC", "cubic": "INTER_CUBIC"})
_PIL = {"lanczos": "LANCZOS", "box": "BOX"}


def resize(array: Any, size: tuple[int, int], interpolation: str | None) -> Any:
    """``array`` (uint8 ``[H, W, C]``) resized to ``size`` ``(W, H)`` as sd-scripts' ``resize_image``."""
    import numpy as np

    height, width = array.shape[:2]
    if interpolation is None:
        interpolation = "area" if width >= size[0] and height >= size[1] else "lanczos"
    if interpolation in _PIL:
        from PIL import Image

        resample = getattr(Image.Resampling, _PIL[interpolation])
        return np.asarray(Image.fromarray(array).resize(size, resample=resample))
    if interpolation not in _CV2:
        raise ValueError(f"unknown resize_interpolation {interpolation!r}")
    from cachedoctor.extras import import_cv2

    cv2 = import_cv2("kohya's resize")  # the [encoders] extra: imported only when a kohya entry is recomputed

    return cv2.resize(array, size, interpolation=getattr(cv2, _CV2[interpolation]))


def prepare(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    import numpy as np
    import torch
    from PIL import Image

    if spec.latent_hw is None:
        from cachedoctor.repair.model import NotRewritable

        raise NotRewritable("the expected latent size is unknown")
    if downscale != STRIDE:
        from cachedoctor.repair.model import NotRewritable

        raise NotRewritable(f"sd-scripts buckets latents at {STRIDE}x; this encoder downscales {downscale}x")
    h, w = spec.latent_hw
    bucket = (w * STRIDE, h * STRIDE)
    alpha = any(k.startswith("alpha_mask") for k in spec.keys)
    with Image.open(image_input(spec, data)) as opened:
        mode = "RGBA" if alpha else "RGB"
        image = np.array(opened if opened.mode == mode else opened.convert(mode), np.uint8)
    oh, ow = image.shape[:2]
    resized = tuple(spec.resize) if spec.resize else Bucketer(BucketRules(bucket)).select(ow, oh)[1]
    if (ow, oh) != resized:
        image = resize(image, (int(resized[0]), int(resized[1])), spec.interpolation)
    rh, rw = image.shape[:2]
    if rw > bucket[0]:
        p = (rw - bucket[0]) // 2
        image = image[:, p : p + bucket[0]]
    if rh > bucket[1]:
        p = (rh - bucket[1]) // 2
        image = image[p : p + bucket[1]]
    if image.shape[0] != bucket[1] or image.shape[1] != bucket[0]:
        from cachedoctor.repair.model import NotRewritable

        raise NotRewritable(f"resized to {rw}x{rh}, the image does not cover its bucket {bucket[0]}x{bucket[1]}")
    recorded: dict[str, Any] = {"original_size": [ow, oh], "crop_ltrb": list(crop_ltrb(bucket, (ow, oh)))}
    if alpha:
        recorded["alpha_mask"] = image[:, :, 3].astype(np.float32) / 255.0
    pixels = torch.from_numpy(np.array(image[:, :, :3])).permute(2, 0, 1).float().div(255)
    return Prepared((pixels - 0.5) / 0.5, recorded)
