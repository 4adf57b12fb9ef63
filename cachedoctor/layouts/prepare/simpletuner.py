"""SimpleTuner (commit bc8e6ab): the resizes and crop its VAE cache applies, from its code.

What ``VAECache.process_buckets`` does to an image (``crop: false``, the default), as verified
against latents SimpleTuner wrote (``fixtures/trainers/simpletuner/``):

1. Decode (``image_manipulation/load.py``: OpenCV's ``imdecode`` through ``trainingsample``, RGB;
   no EXIF rotation is applied: OpenCV's unchanged-mode decode ignores it and ``exif_transpose``
   later finds no EXIF on the array-built image).
2. ``BatchedTrainingSamples.process_aspect_grouped_images``: when two or more images of one aspect
   bucket in a processing batch need a resize, each is first resized straight to the bucket's
   ``target_size`` (aspect not kept) with ``trainingsample``'s resize, which is OpenCV's
   ``INTER_LINEAR`` on uint8 (bilinear at pixel centres, no antialiasing when shrinking, 11-bit
   fixed point). ``resize_linear`` below does that arithmetic in numpy, bit for bit. The layout
   says whether an image took this step (``spec.pre_resize``).
3. ``TrainingSample.resize``: resize to ``intermediary_size`` with PIL ``LANCZOS``: the metadata
   read from JSON holds lists, ``trainingsample`` refuses a list size, and SimpleTuner falls back
   to PIL. Then crop ``target_size`` at ``crop_coordinates`` (top, left).
4. ``ToTensor`` + ``Normalize([0.5], [0.5])``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cachedoctor.layouts.prepare import cover
from cachedoctor.layouts.prepare.interface import Prepared, image_input, target_size, to_pixels

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec

_BITS = 11
_ONE = 1 << _BITS


def prepare(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    import numpy as np
    from PIL import Image

    if spec.crop is None or spec.resize is None:
        return cover.prepare(spec, downscale, data)
    tw, th = target_size(spec, downscale)
    with Image.open(image_input(spec, data)) as opened:
        image = opened.convert("RGB")
    h, w = spec.latent_hw or (0, 0)
    cw, ch = w * 8, h * 8  # the recorded sizes are in the trainer's 8x pixel space
    if spec.pre_resize is not None:
        pw, ph = spec.pre_resize
        if image.size != (pw, ph):
            image = Image.fromarray(resize_linear(np.asarray(image, dtype=np.uint8), pw, ph))
    rw, rh = spec.resize
    image = image.resize((rw, rh), Image.Resampling.LANCZOS)
    top, left = spec.crop
    image = image.crop((left, top, left + cw, top + ch))
    if (cw, ch) != (tw, th):  # an encoder of another downscale (tests' tiny VAEs) gets the crop resized
        image = image.resize((tw, th), Image.Resampling.LANCZOS)
    return Prepared(to_pixels(image), {})


def _taps(src: int, dst: int, clamp_weights: bool) -> tuple[Any, Any, Any]:
    """Source indices and 11-bit weights of OpenCV's INTER_LINEAR along one axis. Past the edges
    OpenCV clamps the indices; horizontally it also moves the whole weight onto the edge pixel,
    vertically it keeps the weights (each term is floored on its own, so the two differ)."""
    import numpy as np

    scale = 1.0 / (dst / src)  # as OpenCV: 1 / inv_scale
    f = ((np.arange(dst, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    i = np.floor(f).astype(np.int64)
    f = (f - i.astype(np.float32)).astype(np.float32)
    if clamp_weights:
        low, high = i < 0, i >= src - 1
        f[low], i[low] = 0, 0
        f[high], i[high] = 0, src - 1
    w1 = np.rint(f * np.float32(_ONE)).astype(np.int64)
    w0 = np.rint((np.float32(1) - f) * np.float32(_ONE)).astype(np.int64)
    return np.clip(i, 0, src - 1), np.clip(i + 1, 0, src - 1), (w0, w1)


def resize_linear(array: Any, width: int, height: int) -> Any:
    """``cv2.resize(array, (width, height), interpolation=cv2.INTER_LINEAR)`` for uint8 HxWx3."""
    import numpy as np

    sh, sw = array.shape[:2]
    if (sw, sh) == (width, height):
        return array.copy()
    if sw == 2 * width and sh == 2 * height:  # OpenCV takes its area path: the mean of 2x2, rounded
        s = array.astype(np.int64)
        total = s[0::2, 0::2] + s[0::2, 1::2] + s[1::2, 0::2] + s[1::2, 1::2]
        return ((total + 2) >> 2).astype(np.uint8)
    x0, x1, (a0, a1) = _taps(sw, width, True)
    y0, y1, (b0, b1) = _taps(sh, height, False)
    s = array.astype(np.int64)
    rows = s[:, x0] * a0[None, :, None] + s[:, x1] * a1[None, :, None]  # horizontal pass, int
    top, bottom = rows[y0] >> 4, rows[y1] >> 4
    out = (((b0[:, None, None] * top) >> 16) + ((b1[:, None, None] * bottom) >> 16) + 2) >> 2
    return np.clip(out, 0, 255).astype(np.uint8)
