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

from typing import Any

from cachedoctor import keynames
from cachedoctor.layouts.prepare import Prepared
from cachedoctor.repair.model import NotRewritable, RecomputeSpec
from cachedoctor.repair.torch_io import (
    TORCH_FORMATS,
    as_recorded,
    cast,
    load_template,
    save_entries,
    serialize,
    torch_dtype,
)


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
    if fmt != spec.container_format:  # the layout's rule wins over a peer's bytes: never another container
        raise NotRewritable(
            f"its healthy peer {spec.template} is a {fmt} file where the layout writes {spec.container_format}; "
            "re-cache it with the trainer"
        )
    if spec.writer == "bare-tensor" or (shape is not None and isinstance(shape, torch.Tensor)):
        if latent is None:
            raise NotRewritable("a bare-tensor entry needs a latent")
        if fmt not in TORCH_FORMATS:  # safetensors and npz hold named tensors only
            raise NotRewritable(f"a {fmt} file holds named tensors, and the layout names no key for its latent")
        _fits("<root>", latent, shape, spec, encoder)
        return serialize(latent.to(torch_dtype(spec.dtype)).contiguous().clone(), fmt)
    if isinstance(shape, dict):  # the template's keys in its order, then any the layout adds (kohya's flip_aug)
        named = [_named(k, spec) for k in shape]
        extra = [(k, _named(k, spec)) for k in spec.keys if k not in shape]
        keys = list(zip(shape, named, strict=True)) + [(k, n) for k, n in extra if n not in named]
    else:  # no peer to copy: the keys the layout names (at least the latent's)
        named = list(spec.keys) or ([spec.key] if spec.role == "latent" and spec.key else list(texts or {}))
        keys = [(k, k) for k in named]
    out: dict[str, Any] = {}
    for key, name in keys:
        like = shape.get(key) if isinstance(shape, dict) else None
        out[name] = _value(name, like, spec, latent, flipped, prepared, texts or {})
        if like is not None and (_is_latent(name, spec) or name.startswith("latents_flipped") or name in (texts or {})):
            _fits(name, out[name], like, spec, encoder)
    return save_entries(out, fmt, dict(spec.metadata))


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
        if _is_latent(key, spec):
            return cast(latent, like, spec.dtype)
        if key.startswith("latents_flipped") and flipped is not None:
            return cast(flipped, like, spec.dtype)
        base = _base(key)
        if prepared is not None and base in prepared.recorded:
            return as_recorded(prepared.recorded[base], like)
    elif key in texts:
        value = texts[key]
        if isinstance(like, torch.Tensor) and like.dim() == value.dim() + 1:
            value = value.unsqueeze(0)
        return cast(value, like, str(like.dtype).replace("torch.", "") if isinstance(like, torch.Tensor) else "float32")
    raise NotRewritable(f"the healthy peers hold {key!r}, which this repair cannot make; re-cache with the trainer")


def _named(key: str, spec: RecomputeSpec) -> str:
    """A healthy peer's key as this entry names it. Keys that spell the bucket (kohya's
    ``latents_16x12``, ``crop_ltrb_16x12``; musubi's ``latents_1x16x12_bfloat16``) get this
    entry's latent size, and the latent's key the dtype it is written in; the key the layout
    names for the latent (``spec.key``) is taken as it is."""
    parsed = keynames.parse(key)
    if parsed.dims is None and parsed.dtype is None:
        return key
    if spec.key and parsed.family == keynames.family(spec.key):
        return spec.key
    dims = parsed.dims
    if dims is not None and spec.latent_hw is not None:
        h, w = spec.latent_hw
        dims = (h, w) if len(dims) == 2 else (*dims[:-2], h, w)
    return keynames.spell(key, dims)


def _is_latent(key: str, spec: RecomputeSpec) -> bool:
    """``key`` is where the latent goes: the layout's key, or one of its family (another bucket's)."""
    return key == spec.key or (bool(spec.key) and keynames.family(key) == keynames.family(spec.key))


def _base(key: str) -> str:
    """A key less its spelled bucket (``crop_ltrb_16x12`` -> ``crop_ltrb``): what a preparer records."""
    family = keynames.parse(key).family
    for placeholder in ("_HxW", "_FxHxW"):
        if family.endswith(placeholder):
            return family[: -len(placeholder)]
    return family
