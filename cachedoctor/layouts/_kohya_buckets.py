"""kohya-ss sd-scripts' aspect-ratio buckets, written from reading its ``library/train_util.py``
(``BucketManager``: ``make_buckets``, ``select_bucket``, ``round_to_steps``, ``get_crop_ltrb``),
``library/model_util.py`` (``make_bucket_resolutions``) and the dataset's ``make_buckets`` /
``adjust_min_max_bucket_reso_by_steps`` (sd-scripts commit 48d368f).

Sizes are ``(W, H)`` in pixels, as sd-scripts keeps them. For each image it picks a bucket (the
size the latent is encoded at) and a resized size (the image is resized to it, then centre-cropped
to the bucket). The latent is the bucket // 8, height first.

* ``enable_bucket`` off: one bucket, the dataset's resolution.
* ``enable_bucket`` on, ``bucket_no_upscale`` off: the predefined buckets of about the
  resolution's area between ``min_bucket_reso`` and ``max_bucket_reso`` in ``bucket_reso_steps``;
  the image's own size if it is one of them, else the one whose aspect ratio is nearest (the first
  in sorted order on a tie); the image is scaled so that it covers the bucket.
* ``bucket_no_upscale`` on: no predefined buckets; an image larger than the resolution's area is
  shrunk to that area (its sides rounded to steps, whichever rounding keeps the aspect ratio
  better), and the bucket is the (resized) size rounded down to steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Size = tuple[int, int]  # (W, H)


def bucket_resolutions(max_reso: Size, min_size: int, max_size: int, divisible: int) -> list[Size]:
    """The predefined buckets (sorted) for a ``max_reso`` area (sd-scripts' ``make_bucket_resolutions``)."""
    max_area = max_reso[0] * max_reso[1]
    resos = {(int(math.sqrt(max_area) // divisible) * divisible,) * 2}
    width = min_size
    while width <= max_size:
        height = min(max_size, int((max_area // width) // divisible) * divisible)
        if height >= min_size:
            resos.add((width, height))
            resos.add((height, width))
        width += divisible
    return sorted(resos)


@dataclass(frozen=True)
class BucketRules:
    """One sd-scripts dataset's bucket settings (as the dataset holds them after its checks)."""

    resolution: Size  # (W, H)
    enable_bucket: bool = False
    min_bucket_reso: int = 256
    max_bucket_reso: int = 1024
    bucket_reso_steps: int = 64
    bucket_no_upscale: bool = False

    def adjusted(self) -> BucketRules:
        """min/max made multiples of the steps, as the dataset does before it buckets."""
        if not self.enable_bucket:
            return self
        step = self.bucket_reso_steps
        low = self.min_bucket_reso - self.min_bucket_reso % step
        high = self.max_bucket_reso
        if high % step:
            high = high + step - high % step
        return BucketRules(self.resolution, True, low, high, step, self.bucket_no_upscale)

    def problem(self) -> str | None:
        """Why sd-scripts would refuse these settings, else None."""
        if self.resolution[0] <= 0 or self.resolution[1] <= 0:
            return f"resolution {self.resolution} must be positive"
        if not self.enable_bucket:
            return None
        if self.bucket_reso_steps <= 0:
            return "bucket_reso_steps must be positive"
        rules = self.adjusted()
        if min(self.resolution) < rules.min_bucket_reso:
            return f"min_bucket_reso {rules.min_bucket_reso} is larger than the resolution {self.resolution}"
        if max(self.resolution) > rules.max_bucket_reso:
            return f"max_bucket_reso {rules.max_bucket_reso} is smaller than the resolution {self.resolution}"
        return None


class Bucketer:
    """Picks each image's bucket under one dataset's :class:`BucketRules`."""

    def __init__(self, rules: BucketRules) -> None:
        self.rules = rules.adjusted()
        r = self.rules
        self.no_upscale = r.enable_bucket and r.bucket_no_upscale
        self.max_area = r.resolution[0] * r.resolution[1]
        self.steps = r.bucket_reso_steps
        if not r.enable_bucket:
            self.predefined: list[Size] = [r.resolution]
        elif not self.no_upscale:
            self.predefined = bucket_resolutions(
                r.resolution, r.min_bucket_reso, r.max_bucket_reso, r.bucket_reso_steps
            )
        else:
            self.predefined = []
        self.ratios = [w / h for w, h in self.predefined]

    def _round(self, x: float) -> int:
        n = int(x + 0.5)
        return n - n % self.steps

    def select(self, width: int, height: int) -> tuple[Size, Size]:
        """``(bucket, resized_size)`` for an image of ``width`` x ``height`` pixels."""
        aspect = width / height
        if not self.no_upscale:
            reso = (width, height)
            if reso not in self.predefined:
                errors = [abs(r - aspect) for r in self.ratios]
                reso = self.predefined[errors.index(min(errors))]  # the first smallest, as argmin
            scale = reso[1] / height if aspect > reso[0] / reso[1] else reso[0] / width
            return reso, (int(width * scale + 0.5), int(height * scale + 0.5))
        if width * height > self.max_area:
            rw = math.sqrt(self.max_area * aspect)
            rh = self.max_area / rw
            bw = self._round(rw)
            bh_w = self._round(bw / aspect)
            ar_w = bw / bh_w
            bh = self._round(rh)
            bw_h = self._round(bh * aspect)
            ar_h = bw_h / bh
            if abs(ar_w - aspect) < abs(ar_h - aspect):
                resized = (bw, int(bw / aspect + 0.5))
            else:
                resized = (int(bh * aspect + 0.5), bh)
        else:
            resized = (width, height)
        return (resized[0] - resized[0] % self.steps, resized[1] - resized[1] % self.steps), resized


def crop_ltrb(bucket: Size, image_size: Size) -> tuple[float, float, float, float]:
    """Where the image, scaled to fit inside the bucket, sits in it: ``(left, top, right, bottom)``
    (sd-scripts' ``get_crop_ltrb``, the value behind SDXL's ``crop_top_lefts``). Always floats in
    sd-scripts (one side is a quotient), so the array it saves is float64."""
    bucket_ar = bucket[0] / bucket[1]
    image_ar = image_size[0] / image_size[1]
    if bucket_ar > image_ar:
        rw, rh = bucket[1] * image_ar, float(bucket[1])
    else:
        rw, rh = float(bucket[0]), bucket[0] / image_ar
    left = (bucket[0] - rw) // 2
    top = (bucket[1] - rh) // 2
    return float(left), float(top), float(left + rw), float(top + rh)


def latent_hw(bucket: Size, stride: int = 8) -> tuple[int, int]:
    """The latent's ``(h, w)`` for a bucket (sd-scripts: ``bucket // stride``, height first)."""
    return bucket[1] // stride, bucket[0] // stride
