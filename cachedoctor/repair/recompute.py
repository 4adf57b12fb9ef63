"""Make an entry again: the source image prepared the way its trainer prepared it (the layout's
preparer, ``layouts/prepare/``), encoded, and written in the layout's own file shape.

A healthy peer in the same folder is the template: the new file has its container (bare tensor,
dict, npz), its keys in its order, its dtypes and its batch dimensions. Keys the repair knows
how to make are the latent (and kohya's flipped latent), the recorded sizes and crops (kohya
``original_size``/``crop_ltrb``, OneTrainer ``original_resolution``/``crop_offset``) and the
text encoder's outputs; a template with any other key makes the item fail with its name rather
than write a file the trainer would not accept. Loading the template and saving the file are
``torch_io.py``'s.
"""

from __future__ import annotations

import re
from typing import Any

from cachedoctor.layouts.prepare import Prepared
from cachedoctor.repair.model import NotRewritable, RecomputeSpec
from cachedoctor.repair.torch_io import as_recorded, cast, load_template, save_entries, serialize, torch_dtype

#: The bucket suffix of a kohya key (``crop_ltrb_16x12``): the base name is what a preparer records.
_SIZED = re.compile(r"_\d+x\d+$")


def build_file(
    spec: RecomputeSpec,
    latent: Any = None,
    flipped: Any = None,
    prepared: Prepared | None = None,
    texts: dict[str, Any] | None = None,
    encoder: str = "the encoder",
) -> bytes:
    """The new file's bytes. ``latent`` is ``[C, h, w]`` (already scaled when the layout wants
    it); ``texts`` maps the text encoder's keys to one item's tensors (batch dim dropped).
    Raises :class:`EncoderMismatch` (naming ``encoder``) when an output cannot take the place
    of the template's tensor: another rank or channel count."""
    import torch

    fmt, shape = load_template(spec.template) if spec.template else (spec.container_format, None)
    if spec.writer == "bare-tensor" or (shape is not None and isinstance(shape, torch.Tensor)):
        if latent is None:
            raise NotRewritable("a bare-tensor entry needs a latent")
        _fits("<root>", latent, shape, spec, encoder)
        return serialize(latent.to(torch_dtype(spec.dtype)).contiguous().clone(), fmt)
    if isinstance(shape, dict):  # the template's keys in its order, then any the layout adds (kohya's flip_aug)
        keys = list(shape) + [k for k in spec.keys if k not in shape and _for_bucket(k, spec) not in shape]
    else:
        keys = list(spec.keys) or list(texts or {})
    out: dict[str, Any] = {}
    for key in keys:
        like = shape.get(key) if isinstance(shape, dict) else None
        name = _for_bucket(key, spec) if spec.writer == "kohya-npz" else key
        out[name] = _value(name, like, spec, latent, flipped, prepared, texts or {})
        if like is not None and (name == spec.key or name.startswith("latents_flipped") or name in (texts or {})):
            _fits(name, out[name], like, spec, encoder)
    return save_entries(out, fmt)


class EncoderMismatch(Exception):
    """The encoder's output does not fit the cache (another rank or channel count than the
    healthy peers): the item fails and nothing is written."""


def _fits(key: str, value: Any, like: Any, spec: RecomputeSpec, encoder: str) -> None:
    """Refuse an output whose rank or feature size (latent channels, embedding width) differs
    from the template's: the scan would report the written file as ``shape-mismatch``."""
    from cachedoctor.checks.interface import feature_dim

    mine, theirs = tuple(value.shape), tuple(getattr(like, "shape", ()))
    if not theirs:
        return
    if len(mine) != len(theirs) or feature_dim(key, mine) != feature_dim(key, theirs):
        raise EncoderMismatch(
            f"encoder {encoder} gives {key} {list(mine)} where the cache's healthy files hold {list(theirs)} "
            f"(like {spec.template}); is it the model this cache was made with? Nothing written"
        )


def _value(
    key: str,
    like: Any,
    spec: RecomputeSpec,
    latent: Any,
    flipped: Any,
    prepared: Prepared | None,
    texts: dict[str, Any],
) -> Any:
    import torch

    if spec.role == "latent":
        if key == spec.key:
            return cast(latent, like, spec.dtype)
        if key.startswith("latents_flipped") and flipped is not None:
            return cast(flipped, like, spec.dtype)
        base = _SIZED.sub("", key)
        if prepared is not None and base in prepared.recorded:
            return as_recorded(prepared.recorded[base], like)
    elif key in texts:
        value = texts[key]
        if isinstance(like, torch.Tensor) and like.dim() == value.dim() + 1:
            value = value.unsqueeze(0)
        return cast(value, like, str(like.dtype).replace("torch.", "") if isinstance(like, torch.Tensor) else "float32")
    raise NotRewritable(f"the healthy peers hold {key!r}, which this repair cannot make; re-cache with the trainer")


def _for_bucket(key: str, spec: RecomputeSpec) -> str:
    """kohya keys carry the bucket (``latents_16x12``): a peer of another bucket is renamed."""
    if spec.latent_hw is None:
        return key
    h, w = spec.latent_hw
    return _SIZED.sub(f"_{h}x{w}", key)
