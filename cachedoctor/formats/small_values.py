"""Read the few small *values* a dataset comparison needs, still without executing anything.

OneTrainer's ``aggregate.pt`` is a list of plain dicts (image paths, crop sizes) and kohya's
``original_size`` is two int64s; both are read here with the same restricted unpickler and
header parser the scan uses. Tensors inside come back as records, never as data.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from cachedoctor.formats._source import FileSource
from cachedoctor.formats._unpickle import RestrictedUnpickler, zip_storage_ref
from cachedoctor.formats._zip import directory_of, is_zip, read_member
from cachedoctor.formats.interface import ReadError
from cachedoctor.formats.npy import parse_header
from cachedoctor.formats.torch_zip import find_pickle

_PICKLE_LIMIT = 64 * 1024 * 1024
_SMALL_ARRAY = 256  # bytes of data: an original_size or crop_ltrb, never a latent
_INT_CODES = {"int64": "q", "int32": "i", "int16": "h", "uint8": "B", "float64": "d", "float32": "f"}


def read_torch_object(path: str) -> Any:
    """The object a torch.save zip archive holds, with tensors as inert records.

    Raises :class:`ReadError` when the file is no readable torch archive, or when its pickle
    names anything outside the allow-list (such a file is reported by the scan, not trusted).
    """
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        src = FileSource(handle.fileno(), size)
        if not is_zip(src.read_at(0, 4)):
            raise ReadError("unknown-format", "not a torch.save zip archive")
        directory = directory_of(src)
        found = find_pickle(directory)
        if found is None:
            raise ReadError("missing-data-pkl", "zip archive without data.pkl")
        data = read_member(src, directory.members[found[1]], limit=_PICKLE_LIMIT)
    unpickler = RestrictedUnpickler(data, zip_storage_ref)
    try:
        obj = unpickler.load()
    except Exception as exc:  # damaged or hostile pickles raise anything
        raise ReadError("bad-pickle", f"data.pkl does not unpickle ({type(exc).__name__})") from None
    if unpickler.foreign:
        raise ReadError("bad-pickle", f"data.pkl names {unpickler.foreign[0]}, which a cache index never holds")
    return obj


def read_npz_numbers(path: str, prefix: str) -> tuple[float, ...] | None:
    """The values of the first small numeric member of an npz whose name starts with ``prefix``
    (``original_size`` matches ``original_size.npy`` and ``original_size_128x96.npy``)."""
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        src = FileSource(handle.fileno(), size)
        directory = directory_of(src)
        for name, member in sorted(directory.members.items()):
            if not (name == f"{prefix}.npy" or name.startswith(f"{prefix}_")):
                continue
            data = read_member(src, member, limit=_SMALL_ARRAY + 4096)
            header = parse_header(data, name)
            code = _INT_CODES.get(header.dtype)
            count = header.nbytes // max(header.itemsize, 1)
            if code is None or header.nbytes > _SMALL_ARRAY or len(data) < header.data_start + header.nbytes:
                return None
            return struct.unpack_from(f"<{count}{code}", data, header.data_start)
    return None
