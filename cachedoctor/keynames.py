"""What trainers spell into tensor key names: sizes and dtypes, parsed into one key *family*.

Several trainers name a tensor after its shape or dtype, so one kind of tensor goes by many keys:
kohya sd-scripts writes ``latents_<h>x<w>`` (latent units, height first; ``latents_flipped_...``,
``alpha_mask_...``, ``original_size_...`` beside it), musubi-tuner ``latents_{F}x{H}x{W}_{dtype}``
(``latents_image_...``, ``latents_control_{i}_...``) and ``varlen_llm_embed_{dtype}``, ``clip_{dtype}``,
``f_indices_int32`` (musubi's ``cache_io.py``, ``dtype_to_str``/``remove_dtype_suffix`` in
``utils/model_utils.py`` at 30c658c). Peer checks must compare a float32 latent with its bfloat16
peers, and a ``16x12`` latent with a ``12x16`` one, so they group tensors by family
(``latents_FxHxW``, ``varlen_llm_embed``) while messages name the key the file holds. And a key
that spells a size or dtype its tensor does not have is itself a defect (musubi stacks batches by
the size in the name).

Only a whole ``_``-separated part counts as a size (``1x8x8``, ``16x12``), and only a known
torch dtype name at the very end as a dtype, so ordinary keys (``latent``, ``prompt_embeds``,
``latent_image``) are their own family. Light: the scan's workers and the state codec import it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

#: torch dtype names as ``str(dtype).split('.')[-1]`` spells them, longest first so that
#: ``float8_e4m3fnuz`` is not read as ``..._e4m3fn`` plus junk.
TORCH_DTYPES = tuple(
    sorted(
        (
            "float64",
            "float32",
            "float16",
            "bfloat16",
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e5m2",
            "float8_e5m2fnuz",
            "float8_e8m0fnu",
            "complex32",
            "complex64",
            "complex128",
            "int64",
            "int32",
            "int16",
            "int8",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
            "bool",
        ),
        key=len,
        reverse=True,
    )
)
_SIZE = re.compile(r"^\d+(?:x\d+)+$")
#: One item of a file that holds several (a diffusion-pipe shard: ``formats/torch_shard.py``).
_ITEM = re.compile(r"^item \d+/")
#: The placeholder a size of 2 and of 3 parts becomes (kohya's latent size, musubi's frames x size).
_PLACEHOLDER = {2: "HxW", 3: "FxHxW"}


class KeyName(NamedTuple):
    """A key taken apart: ``family`` is the key with its size spelled as a placeholder and its
    dtype dropped; ``dims`` and ``dtype`` are what it spelled (``None``: nothing)."""

    family: str
    dims: tuple[int, ...] | None
    dtype: str | None


@lru_cache(maxsize=8192)
def parse(key: str) -> KeyName:
    """``latents_1x8x8_bfloat16`` -> ``("latents_FxHxW", (1, 8, 8), "bfloat16")``;
    ``latents_16x12`` -> ``("latents_HxW", (16, 12), None)``; ``latent`` -> ``("latent", None, None)``.
    A shard's ``item 3/latents`` -> ``("item */latents", ...)``: the items of a shard are peers."""
    item = _ITEM.match(key)
    if item is not None:
        inner = parse(key[item.end() :])
        return KeyName("item */" + inner.family, inner.dims, inner.dtype)
    rest, dtype = key, None
    for name in TORCH_DTYPES:
        if rest.endswith("_" + name) and len(rest) > len(name) + 1:
            rest, dtype = rest[: -len(name) - 1], name
            break
    head, sep, last = rest.rpartition("_")
    if sep and _SIZE.match(last):
        dims = tuple(int(p) for p in last.split("x"))
        return KeyName(f"{head}_{_PLACEHOLDER.get(len(dims), 'x'.join('N' * len(dims)))}", dims, dtype)
    return KeyName(rest, None, dtype)


def family(key: str) -> str:
    """The family peers are grouped by (see :func:`parse`)."""
    return parse(key).family


def spell(key: str, dims: tuple[int, ...] | None = None, dtype: str | None = None) -> str:
    """``key`` with its spelled size replaced by ``dims`` and its dtype by ``dtype`` (each only
    when the key spells one): how a recompute names a tensor of another bucket or dtype after a
    peer's key. ``spell("latents_1x8x8_bfloat16", (1, 16, 12))`` -> ``latents_1x16x12_bfloat16``."""
    parsed = parse(key)
    if parsed.dims is None and parsed.dtype is None:
        return key
    base = parsed.family
    if parsed.dims is not None:
        size = "x".join(str(d) for d in (dims if dims is not None else parsed.dims))
        base = base[: -len(_PLACEHOLDER.get(len(parsed.dims), "x".join("N" * len(parsed.dims))))] + size
    if parsed.dtype is not None:
        base += "_" + (dtype or parsed.dtype)
    return base


def is_latent_family(name: str) -> bool:
    """A family that holds a latent whose spatial size the key spells (``latents_HxW``,
    ``latents_FxHxW``, ``latents_control_0_FxHxW``): not a mask or a recorded size beside it."""
    return name.startswith("latents") and name.endswith(("_HxW", "_FxHxW"))


def size_disagrees(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` is *not* the size its key spells as ``dims``.

    kohya's ``(h, w)`` is the end of ``(C, h, w)``; musubi's ``(F, H, W)`` is ``(C, F, H, W)``
    less its channels, or ``(C, H, W)`` with ``F == 1`` (Z-Image, Flux Kontext store no frame
    axis); a patch-token latent (``(h, w, D)``, musubi's HiDream-O1) spells its leading sizes.
    """
    if len(dims) == 2:
        return not (len(shape) >= 2 and (tuple(shape[-2:]) == dims or tuple(shape[:2]) == dims))
    if len(dims) == 3:
        f, h, w = dims
        if len(shape) == 4:
            return tuple(shape[1:]) != dims
        if len(shape) == 3 and f == 1:
            return not (tuple(shape[-2:]) == (h, w) or tuple(shape[:2]) == (h, w))
        return True
    return False


__all__ = ["TORCH_DTYPES", "KeyName", "family", "is_latent_family", "parse", "size_disagrees", "spell"]
