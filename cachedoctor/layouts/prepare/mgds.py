"""OneTrainer (mgds): the image prepared as OneTrainer's text-to-image data loader prepares it before
``EncodeVAE`` (OneTrainer 23df383 ``DataLoaderText2ImageMixin``, mgds 3a6994a):

1. ``LoadImage``: torchvision ``read_image(path, RGB, apply_exif_orientation=True)``, then
   ``x / 255`` (range 0..1) in the train dtype. Here: PIL with the EXIF orientation applied,
   converted to RGB (the same pixels for PNG; for JPEG both decode with libjpeg).
2. ``CalcAspect``: ``original_resolution = (H, W)`` of the loaded image (a tuple of ints).
3. ``AspectBucketing``: the aggregate's ``crop_resolution`` is the bucket; the image is scaled so
   it covers the bucket: when ``H/W`` is above the bucket's aspect, the width becomes the bucket's
   and the height ``round(H * cw / W)`` (Python's round), else the height becomes the bucket's and
   the width ``round(W * ch / H)``.
4. ``ScaleCropImage``: torchvision ``Resize(bilinear, antialias=True)`` on the float tensor, which
   is ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=True)``
   (and nothing when the size is unchanged); then a crop at ``crop_offset = ((sh - ch) // 2,
   (sw - cw) // 2)`` (``enable_crop_jitter`` off; with it on, mgds draws the offset from its RNG).
5. ``RescaleImageChannels``: ``x * 2 - 1``.

Augmentations that run before caching (random flip, rotate, colour) are not repeated here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO

from cachedoctor.layouts.prepare.interface import Prepared, image_input, target_size

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec


def prepare(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    cw, ch = target_size(spec, downscale)  # the bucket: aggregate crop_resolution (H, W) = (ch, cw)
    return prepare_path(image_input(spec, data), ch, cw)


def prepare_path(path: str | BinaryIO, crop_h: int, crop_w: int) -> Prepared:
    """``path`` scaled to cover ``crop_h x crop_w`` and centre-cropped, as mgds does it."""
    import torch

    image = load_image(path)
    h, w = int(image.shape[1]), int(image.shape[2])
    sh, sw = scale_resolution(h, w, crop_h, crop_w)
    if (sh, sw) != (h, w):
        image = torch.nn.functional.interpolate(
            image.unsqueeze(0), size=(sh, sw), mode="bilinear", align_corners=False, antialias=True
        ).squeeze(0)
    top, left = (sh - crop_h) // 2, (sw - crop_w) // 2
    image = image[:, top : top + crop_h, left : left + crop_w]
    pixels = (image - 0.0) * 2.0 + -1.0
    recorded = {"original_resolution": (h, w), "crop_offset": (top, left)}
    return Prepared(pixels.contiguous(), recorded)


def load_image(path: str | BinaryIO) -> Any:
    """float32 ``[3, H, W]`` in ``[0, 1]``: RGB, EXIF orientation applied, ``x / 255``."""
    import numpy as np
    import torch
    from PIL import Image, ImageOps

    with Image.open(path) as opened:
        image = ImageOps.exif_transpose(opened).convert("RGB")
    array = np.asarray(image, dtype=np.uint8)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).to(torch.float32) / 255


def scale_resolution(h: int, w: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """The size mgds' ``AspectBucketing`` scales an ``h x w`` image to before cropping."""
    if h / w > crop_h / crop_w:
        return round(h * (crop_w / w)), crop_w
    return crop_h, round(w * (crop_h / h))
