"""kohya-ss/musubi-tuner's buckets, resizing and clip windows, re-implemented from reading its code at
commit 30c658c (paths below ``src/musubi_tuner/``; ``ivd`` is ``dataset/image_video_dataset.py``).
Plain Python: ``numpy.argmin`` and ``numpy.linspace(..., dtype=int)`` are written out with numpy's
rules (the first smallest; ``floor(k * step)`` with the last value exact).

* Buckets: ``dataset/bucket.py:74-121`` (``BucketSelector``). Images are bucketed with the
  dataset's ``enable_bucket`` / ``bucket_no_upscale`` (ivd:363); clips are always bucketed with
  ``enable_bucket`` on and ``no_upscale`` off while caching (ivd:698), whatever the dataset says,
  and the bucket is chosen from the first frame. Training recomputes a bucket from the size in
  each name with the dataset's own settings (ivd:505, ivd:858).
* Resize: ``dataset/media_utils.py:101-137`` (``resize_image_to_bucket``): scale to cover,
  PIL LANCZOS when growing, OpenCV INTER_AREA otherwise, centre crop.
* Frames: ``VideoDataset.__init__`` (ivd:644-671: target_frames rounded to N*4+1, uniform with one
  sample is head, head reads only max(target_frames) frames), ``retrieve_latent_cache_batches``
  (ivd:741-771: the windows) and the frame dropping to the arch's fps (``media_utils.py:195-226``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cachedoctor.layouts._musubi_archs import arch_of

Size = tuple[int, int]  # (W, H), as musubi keeps sizes
EXTRACTIONS = ("head", "chunk", "slide", "uniform", "full")
VAE_FRAME_STRIDE = 4  # ivd:628


def divisible_by(num: int, divisor: int) -> int:
    """``media_utils.py:97-98``: rounded down to a multiple (0 below the divisor)."""
    return num - num % divisor


def bucket_resolutions(resolution: Size, enable_bucket: bool, arch_name: str) -> list[Size]:
    """``BucketSelector.__init__``'s buckets (bucket.py:86-102), sorted. ``ValueError`` where musubi
    divides by zero (a resolution under about twice the arch's step: no bucket can be made)."""
    steps = arch_of(arch_name).reso_steps
    if not enable_bucket:
        return [resolution]
    area = resolution[0] * resolution[1]
    sqrt_size = int(math.sqrt(area))
    min_size = divisible_by(sqrt_size // 2, steps)
    if min_size <= 0:
        raise ValueError(f"resolution {resolution[0]}x{resolution[1]} is too small for {steps}-pixel buckets")
    resos: set[Size] = set()
    for w in range(min_size, sqrt_size + steps, steps):
        h = divisible_by(area // w, steps)
        resos.update(((w, h), (h, w)))
    return sorted(resos)


def argmin(values: list[float]) -> int:
    """``numpy.argmin`` of a list without NaN: the index of the first smallest value."""
    best = 0
    for i, value in enumerate(values):
        if value < values[best]:
            best = i
    return best


def bucket_resolution(image_size: Size, resolution: Size, enable_bucket: bool, no_upscale: bool, arch: str) -> Size:
    """``BucketSelector.get_bucket_resolution``: the ``(W, H)`` an image of ``image_size`` is cut to.
    With ``bucket_no_upscale`` (only with buckets on), an image no larger than the resolution's area
    keeps its size rounded down to the step (which can be 0 for a side under the step: musubi then
    refuses the image when it encodes it); otherwise the bucket nearest in aspect ratio."""
    steps = arch_of(arch).reso_steps
    no_upscale = no_upscale and enable_bucket  # BaseDataset.__init__ (ivd:132-133), BucketSelector (bucket.py:86-89)
    if no_upscale and image_size[0] * image_size[1] <= resolution[0] * resolution[1]:
        return divisible_by(image_size[0], steps), divisible_by(image_size[1], steps)
    resos = bucket_resolutions(resolution, enable_bucket, arch)
    aspect = image_size[0] / image_size[1]
    return resos[argmin([abs(w / h - aspect) for w, h in resos])]


def video_bucket_resolution(frame_size: Size, resolution: Size, arch: str) -> Size:
    """A clip's bucket while caching: always buckets on, no_upscale off (ivd:698, media_utils.py:163-164).
    It is also the size in the clip's cache name (the frame is resized before its size is read, ivd:824)."""
    return bucket_resolution(frame_size, resolution, True, False, arch)


@dataclass(frozen=True, slots=True)
class ResizePlan:
    """How ``resize_image_to_bucket`` cuts an image to its bucket."""

    resized: Size  # (W, H) after the resize, before the crop
    crop: Size  # (left, top) of the bucket in the resized image
    resample: str  # "none" (already the bucket's size), "lanczos" (PIL, growing), "area" (OpenCV INTER_AREA)


def resize_plan(image_size: Size, bucket: Size) -> ResizePlan:
    """media_utils.py:113-137: scale to cover the bucket (``int(x * scale + 0.5)``), LANCZOS when the
    scale is above 1 else INTER_AREA (also for a scale of exactly 1), crop ``(size - bucket) // 2``."""
    if tuple(bucket) == tuple(image_size):
        return ResizePlan((image_size[0], image_size[1]), (0, 0), "none")
    scale = max(bucket[0] / image_size[0], bucket[1] / image_size[1])
    width, height = int(image_size[0] * scale + 0.5), int(image_size[1] * scale + 0.5)
    return ResizePlan(
        (width, height), ((width - bucket[0]) // 2, (height - bucket[1]) // 2), "lanczos" if scale > 1 else "area"
    )


def round_target_frames(target_frames: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """ivd:644-657: unique, each rounded down to N*4+1, sorted."""
    return tuple(sorted({(f - 1) // VAE_FRAME_STRIDE * VAE_FRAME_STRIDE + 1 for f in target_frames}))


def _linspace_int(stop: int, num: int) -> list[int]:
    """``numpy.linspace(0, stop, num, dtype=int)``: ``floor(k * (stop / (num - 1)))``, the last exactly ``stop``."""
    if num <= 0:
        return []
    if num == 1:
        return [0]
    step = float(stop) / (num - 1)
    values = [math.floor(k * step) if step != 0 else 0 for k in range(num)]
    values[-1] = stop
    return values


def frame_windows(
    frame_count: int,
    target_frames: tuple[int, ...] | list[int],
    frame_extraction: str = "head",
    frame_stride: int = 1,
    frame_sample: int = 1,
    max_frames: int = 129,
) -> list[tuple[int, int]]:
    """The ``(start, frames)`` windows a clip of ``frame_count`` frames (after fps dropping) gives, in
    musubi's order (ivd:741-771). Duplicates are kept: uniform sampling can give the same window
    twice, and musubi then writes the same file twice."""
    targets = round_target_frames(target_frames)
    if frame_extraction == "uniform" and frame_sample == 1:
        frame_extraction = "head"  # ivd:666-668
    windows: list[tuple[int, int]] = []
    if frame_extraction == "head":
        windows = [(0, t) for t in targets if frame_count >= t]
    elif frame_extraction == "chunk":
        windows = [(i, t) for t in targets for i in range(0, frame_count, t) if i + t <= frame_count]
    elif frame_extraction == "slide":
        windows = [(i, t) for t in targets if frame_count >= t for i in range(0, frame_count - t + 1, frame_stride)]
    elif frame_extraction == "uniform":
        windows = [(i, t) for t in targets if frame_count >= t for i in _linspace_int(frame_count - t, frame_sample)]
    elif frame_extraction == "full":
        t = min(frame_count, max_frames)
        windows = [(0, (t - 1) // VAE_FRAME_STRIDE * VAE_FRAME_STRIDE + 1)]
    else:
        raise ValueError(f"frame_extraction {frame_extraction} is not supported")  # ivd:770-771
    return windows


def loaded_frames(total: int, source_fps: float | None, target_fps: float | None, end: int | None = None) -> int:
    """How many frames ``load_video`` returns from a clip of ``total`` frames (media_utils.py:152-226):
    with both fps, a running ``index += target / source`` keeps a frame when ``int(index)`` moves on
    (a float sum, as musubi adds it); ``end`` (head: ``max(target_frames)``) stops at that index."""
    if source_fps is None or target_fps is None:
        return total if end is None else min(total, end)
    delta, position, previous, kept = target_fps / source_fps, 0.0, -1, 0
    for _ in range(total):
        index = int(position)
        position += delta
        if index == previous:
            continue
        previous = index
        if end is not None and index >= end:
            break
        kept += 1
    return kept
