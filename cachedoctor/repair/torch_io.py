"""Reading and writing cache files' tensors: the only place repair loads or saves data.

Loading is the safe path only. A torch file is first read by the restricted reader (a file naming
any global outside the allow-list is never loaded), then with ``torch.load(weights_only=True,
map_location="cpu")``; npz without pickles; safetensors as it is. Saving keeps the trainer's
container: a gzipped torch file is gzipped again (with a fixed mtime, so equal content is equal
bytes), a legacy (pre-zip) file stays legacy. torch and numpy are imported lazily, so planning a
repair (and ``--dry-run``) never pays for them.
"""

from __future__ import annotations

import gzip
import io
from functools import lru_cache
from typing import Any

from cachedoctor.formats import read_file
from cachedoctor.formats.interface import FileMeta, ReadError
from cachedoctor.lifetime import reraise_interrupt
from cachedoctor.repair.model import NotRewritable

TORCH_FORMATS = frozenset({"torch-zip", "torch-gzip", "torch-legacy"})


def load_safely(path: str) -> tuple[Any, str]:
    """The object a torch.save file holds, on cpu, and its format; never runs pickle code."""
    return load_checked(path, None)


def restricted_verdict(path: str, raw: bytes | None) -> FileMeta:
    """The restricted reader's quick read of ``raw``, the bytes already read from ``path``
    (``None``: read them here; in memory: :func:`cachedoctor.formats.read_bytes`): the zip
    directory and the pickle, run by nothing. Raises :class:`NotRewritable` for a file that is
    not a torch file, or whose pickle names anything outside the allow-list."""
    from cachedoctor.formats import read_bytes, read_file

    try:
        meta = read_file(path) if raw is None else read_bytes(path, raw)
    except ReadError as exc:
        raise NotRewritable(f"unreadable ({exc.message})") from None
    if meta is None:
        raise NotRewritable("not a torch.save, safetensors or npz file")
    if meta.format not in TORCH_FORMATS:
        raise NotRewritable(f"a {meta.format} file holds no storages to rewrite")
    if meta.foreign_globals or meta.unreadable_reason:
        raise NotRewritable("its pickle names globals outside the allow-list; it is never loaded")
    return meta


def load_checked(path: str, raw: bytes | None, meta: FileMeta | None = None) -> tuple[Any, str]:
    """:func:`load_safely` of ``raw``, the bytes already read from ``path`` (``None``: read them
    here). The restricted reader judges those same bytes first (:func:`restricted_verdict`;
    ``meta``: its verdict, already taken)."""
    import torch

    if meta is None:
        meta = restricted_verdict(path, raw)
    if raw is None:
        with open(path, "rb") as handle:
            raw = handle.read()
    if meta.format == "torch-gzip":
        raw = gzip.decompress(raw)
    try:
        obj = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError...
        reraise_interrupt(exc)
        raise NotRewritable(f"torch.load(weights_only=True) refused it ({type(exc).__name__}: {exc})") from None
    return obj, meta.format


def serialize(obj: Any, fmt: str) -> bytes:
    """``torch.save`` bytes of ``obj`` in the torch container ``fmt`` (zip, gzip or legacy)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=fmt != "torch-legacy")
    data = buf.getvalue()
    return gzip.compress(data, mtime=0) if fmt == "torch-gzip" else data


@lru_cache(maxsize=32)
def load_template(path: str) -> tuple[str, Any]:
    """A healthy peer's format and content, loaded safely (torch ``weights_only``, numpy without
    pickles, safetensors)."""
    meta = read_file(path, deep=False)
    fmt = meta.format if meta is not None else "unknown"
    if fmt == "npz":
        import numpy as np

        with np.load(path, allow_pickle=False) as data:
            return fmt, {k: data[k] for k in data.files}
    if fmt == "safetensors":
        from safetensors.torch import load_file

        return fmt, load_file(path)
    obj, fmt = load_safely(path)
    return fmt, obj


def save_entries(entries: dict[str, Any], fmt: str, metadata: dict[str, str] | None = None) -> bytes:
    """A dict entry's bytes in the container ``fmt``: npz (tensors as float32 arrays when numpy
    has no such dtype), safetensors (with the trainer's ``metadata``), or a torch container.
    Only safetensors holds metadata: anything else refuses it rather than drop it."""
    if metadata and fmt != "safetensors":
        raise NotRewritable(f"a {fmt} file holds no metadata, and the layout gives this entry some")
    if fmt == "npz":
        import numpy as np

        buf = io.BytesIO()
        np.savez(buf, **{k: to_numpy(v) for k, v in entries.items()})
        return buf.getvalue()
    if fmt == "safetensors":
        from safetensors.torch import save

        return save({k: v.contiguous() for k, v in entries.items()}, metadata=metadata or None)
    return serialize(entries, fmt)


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` (or ``"torch.bfloat16"``) -> ``torch.bfloat16``."""
    import torch

    return getattr(torch, name.replace("torch.", ""))


def cast(tensor: Any, like: Any, dtype: str) -> Any:
    """``tensor`` as the template's value is: a numpy array of its dtype, else a torch tensor
    of ``dtype`` that owns its data."""
    import numpy as np

    if isinstance(like, np.ndarray):
        return tensor.float().numpy().astype(like.dtype) if like.dtype != np.float32 else tensor.float().numpy()
    return tensor.to(torch_dtype(dtype)).contiguous().clone()


def as_recorded(values: list[int], template_value: Any) -> Any:
    """Small recorded numbers in the template's type: numpy array, tensor, tuple or list."""
    import numpy as np
    import torch

    if isinstance(template_value, np.ndarray):
        return np.array(values, dtype=template_value.dtype)
    if isinstance(template_value, torch.Tensor):
        return torch.tensor(values, dtype=template_value.dtype)
    if isinstance(template_value, list):
        return list(values)
    return tuple(values)


def to_numpy(value: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    return np.asarray(value)
