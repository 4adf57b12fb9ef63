"""Lossless rewrites: the same tensors saved again, with every storage on cpu (``rewrite-cpu``)
or each tensor as its own view's data (``clone-storage``).

The file is read through the safe path only: the restricted reader first (a file naming any
global outside the allow-list is never loaded; it is quarantined instead), then the tensor data
with ``torch.load(weights_only=True, map_location="cpu")``, or, for a torch zip archive of one
tensor or a dict of tensors, from its bytes to the bytes torch.save would write, without torch
(``torch_rewrite.py``). It is written back in the container
the trainer reads: a bare tensor stays a bare tensor, a dict a dict (key order kept), a gzipped
file is gzipped again, a legacy (pre-zip) file stays legacy. The tensors to be saved are compared
bit for bit with what was read, so a rewrite cannot change a value; the written file is read
back deep by the caller. Loading and saving are ``torch_io.py``'s.
"""

from __future__ import annotations

from typing import Any

from cachedoctor.repair.model import NotRewritable
from cachedoctor.repair.torch_io import TORCH_FORMATS, load_checked, load_safely, restricted_verdict, serialize


def transform(obj: Any, clone: bool) -> Any:
    """The same structure with cpu tensors; with ``clone`` each tensor owns exactly its data."""
    import torch

    if isinstance(obj, torch.Tensor):
        tensor = obj.detach().cpu()
        if clone:
            tensor = tensor.clone()
        if isinstance(obj, torch.nn.Parameter):
            return torch.nn.Parameter(tensor, requires_grad=obj.requires_grad)
        return tensor
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) is not dict else {}
        for key, value in obj.items():
            out[key] = transform(value, clone)
        return out
    if isinstance(obj, (list, tuple)):
        items = [transform(v, clone) for v in obj]
        return items if isinstance(obj, list) else type(obj)(items) if type(obj) is tuple else tuple(items)
    return obj


def same(a: Any, b: Any) -> bool:
    """Bitwise equality of two saved objects: structure, keys, dtypes, shapes and bytes."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.device == b.device and (a.data_ptr(), a.stride()) == (b.data_ptr(), b.stride()):
            return True  # the very same memory (``rewrite-cpu`` of a tensor already on cpu): equal bits
        return _bits(a) == _bits(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _bits(t: Any) -> bytes:
    """The tensor's bytes (plain ``bytes ==`` beats ``torch.equal``, which spins up threads)."""
    import torch

    flat = t.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def rewrite_from(path: str, raw: bytes, clone: bool) -> bytes:
    """The new bytes for ``path``, made from ``raw``, its bytes as read once; raises
    :class:`NotRewritable`.

    The tensors to be saved are compared bit for bit with those read before anything is
    written; the new bytes are then judged deep (CRCs, structure, storage sizes) by the caller,
    in memory. (Loading the new bytes again as well cost half the rewrite's time and checked
    what ``torch.save`` does, not what we do.) A torch zip archive of one tensor or a dict of
    tensors is rewritten without torch, to the same bytes (``torch_rewrite.py``); the rest,
    and anything that path does not vouch for, with torch.
    """
    meta = restricted_verdict(path, raw)
    if meta.format == "torch-zip":  # the common files: their bytes rewritten as torch would, without it
        from cachedoctor.repair.torch_rewrite import rewrite_zip

        written = rewrite_zip(raw, clone)
        if written is not None:
            return written
    obj, fmt = load_checked(path, raw, meta)
    new = transform(obj, clone)
    if not same(obj, new):
        raise NotRewritable("the rewritten tensors would differ from the original (not written)")
    return serialize(new, fmt)


__all__ = [
    "TORCH_FORMATS",
    "NotRewritable",
    "load_safely",
    "rewrite_from",
    "same",
    "serialize",
    "transform",
]
