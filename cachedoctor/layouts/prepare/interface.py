"""The image preparation a recompute repeats: one module per trainer, named by ``RecomputeSpec.prepare``.

A recomputed latent only equals the trainer's own when the image went through the very same
resize (filter, rounding, order), crop and colour conversion, so each trainer's rules live in a
module of their own here, written from that trainer's code. A preparer returns the pixels to
encode and the side values the trainer records beside the latent (kohya's ``original_size`` and
``crop_ltrb``, OneTrainer's ``original_resolution`` and ``crop_offset``), keyed by their base
names; ``repair/recompute.py`` writes them under the keys the entry's healthy peers use.

Preparers import torch, numpy and PIL lazily: planning a repair never loads them.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import RecomputeSpec


@dataclass(frozen=True)
class Prepared:
    """One image ready for the encoder, and what the trainer records about how it was cut."""

    pixels: Any  # float32 [3, H, W] in [-1, 1]
    recorded: dict[str, Any] = field(default_factory=dict)  # base key -> value (list of numbers or array)


#: ``RecomputeSpec.prepare`` -> module (in this package) whose ``prepare(spec, downscale, data)`` does it.
PREPARERS = {
    "cover": "cover",  # scale to cover, centre crop (a manifest that records only the latent size)
    "simpletuner": "simpletuner",
    "kohya": "kohya",
    "mgds": "mgds",  # OneTrainer
    "musubi": "musubi",  # kohya-ss musubi-tuner
    "aitoolkit": "aitoolkit",  # ostris ai-toolkit
}


def prepare_image(spec: RecomputeSpec, downscale: int, data: bytes | None = None) -> Prepared:
    """The source of ``spec`` prepared as its trainer prepares it, for a ``downscale``x encoder.
    ``data``: the source's bytes, already fetched (an image in a bucket: ``repair/store_recompute.py``);
    decoded from memory exactly as the file would be."""
    name = PREPARERS.get(spec.prepare)
    if name is None:
        raise ValueError(f"unknown image preparation {spec.prepare!r}; known: {', '.join(PREPARERS)}")
    module = importlib.import_module(f"cachedoctor.layouts.prepare.{name}")
    prepare: Callable[[RecomputeSpec, int, bytes | None], Prepared] = module.prepare
    return prepare(spec, downscale, data)


def target_size(spec: RecomputeSpec, downscale: int) -> tuple[int, int]:
    """``(W, H)`` in pixels of the latent the layout expects."""
    if spec.latent_hw is None:
        from cachedoctor.repair.model import NotRewritable

        raise NotRewritable("the expected latent size is unknown")
    h, w = spec.latent_hw
    return w * downscale, h * downscale


def image_input(spec: RecomputeSpec, data: bytes | None) -> str | BinaryIO:
    """What PIL opens for ``spec``'s source: its bytes when given, else its path."""
    return io.BytesIO(data) if data is not None else spec.source


def open_rgb(path: str | BinaryIO) -> Any:
    """The image as PIL RGB (decoded fully, the file closed)."""
    from PIL import Image

    with Image.open(path) as opened:
        return opened.convert("RGB")


def to_pixels(image: Any) -> Any:
    """A PIL RGB image as float32 ``[3, H, W]`` in ``[-1, 1]`` (``x / 127.5 - 1``, what
    ``Normalize([0.5], [0.5])`` after ``ToTensor`` gives)."""
    import numpy as np
    import torch

    array = np.asarray(image, dtype=np.uint8)
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float() / 127.5 - 1.0
