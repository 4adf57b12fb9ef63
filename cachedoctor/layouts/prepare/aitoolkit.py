"""ostris/ai-toolkit: the image prepared as ai-toolkit prepares it for ``encode_images`` (read from
``toolkit/dataloader_mixins.py`` ``ImageProcessingDTOMixin.load_and_process_image`` l.863-990,
``_cache_one_latent`` l.2038-2039 and ``toolkit/data_loader.py`` l.44-49, 456-472 at commit 27a03a9).

* ``Image.open`` then ``exif_transpose`` (the EXIF orientation applied), then ``convert('RGB')``
  (an alpha channel is dropped, not composited; ``alpha_mask`` strips it the same way).
* ``flip_x`` (``spec.flipped``): ``FLIP_LEFT_RIGHT`` *before* the resize and crop, so the crop
  window is taken from the flipped image at the same ``crop_x``.
* Buckets on (ai-toolkit's default; also ``square_crop``): PIL ``resize((scale_to_width,
  scale_to_height), BICUBIC)`` then ``crop((crop_x, crop_y, crop_x + crop_width, crop_y +
  crop_height))``. Read from ``spec.resize`` = ``(scale_to_width, scale_to_height)``, ``spec.crop``
  = ``(crop_y, crop_x)`` and the crop size = ``spec.latent_hw * downscale`` (buckets are multiples
  of the bucket divisibility, itself a multiple of the VAE's downscale).
* Buckets off: ``resize((int(W * scale), int(H * scale)), BICUBIC)`` (``spec.pre_resize``), a
  torchvision ``CenterCrop`` to the shorter side (offsets ``int(round((size - side) / 2.0))``), then
  ``resize((resolution, resolution), BICUBIC)`` (``spec.resize``), with ``spec.crop`` None.
* ``ToTensor`` then ``RescaleTransform``: ``(x / 255) * 2 - 1`` in float32 (not ``x / 127.5 - 1``,
  which rounds differently in the last bit).

ai-toolkit records nothing beside the latent in the tensors (the placement is in the safetensors
metadata, ``_aitoolkit_rules.metadata_for``), so ``recorded`` is empty. Not reproduced (the layout
should not ask): ``flip_y``, ``standardize_images``, ``random_scale`` without buckets, augmentations
(which turn caching off), video frames, and sizes ``encode_images`` would resize (no multiple of
the downscale).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachedoctor.layouts.prepare.interface import Prepared, image_input

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec


def _not_rewritable(why: str) -> Exception:
    from cachedoctor.repair.model import NotRewritable

    return NotRewritable(why)


def load(spec: RecomputeSpec, data: bytes | None = None) -> Any:
    """The image as ai-toolkit loads it: EXIF orientation applied, RGB, flipped when ``spec.flipped``."""
    from PIL import Image, ImageOps

    with Image.open(image_input(spec, data)) as opened:
        image = ImageOps.exif_transpose(opened).convert("RGB")
    if spec.flipped:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image


def to_pixels(image: Any) -> Any:
    """``transforms.ToTensor()`` then ``RescaleTransform`` (data_loader.py:44-49): float32 [3, H, W]."""
    import numpy as np
    import torch

    tensor = torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()
    return tensor.to(dtype=torch.float32).div(255) * 2 - 1


def prepare(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    from PIL import Image

    if spec.latent_hw is None:
        raise _not_rewritable("the expected latent size is unknown")
    if spec.resize is None:
        raise _not_rewritable("ai-toolkit's scale_to size is unknown (read it from the file's metadata)")
    h, w = spec.latent_hw
    width, height = w * downscale, h * downscale
    image = load(spec, data)
    bicubic = Image.Resampling.BICUBIC
    if spec.pre_resize is not None:  # buckets off: scale, centre square, resize to the resolution
        image = image.resize((int(spec.pre_resize[0]), int(spec.pre_resize[1])), bicubic)
        side = min(image.size)
        top, left = round((image.height - side) / 2.0), round((image.width - side) / 2.0)
        image = image.crop((left, top, left + side, top + side)).resize(
            (int(spec.resize[0]), int(spec.resize[1])), bicubic
        )
    else:
        if spec.crop is None:
            raise _not_rewritable("ai-toolkit's crop_x/crop_y are unknown (read them from the file's metadata)")
        top, left = int(spec.crop[0]), int(spec.crop[1])
        image = image.resize((int(spec.resize[0]), int(spec.resize[1])), bicubic)
        image = image.crop((left, top, left + width, top + height))
    if image.size != (width, height):
        raise _not_rewritable(
            f"prepared {image.size[0]}x{image.size[1]} pixels, but the latent needs {width}x{height} "
            "(ai-toolkit would resize them in encode_images)"
        )
    return Prepared(to_pixels(image), {})
