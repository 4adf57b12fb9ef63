"""Read the plain *values* of a small torch.save index, still without executing anything.

OneTrainer's ``aggregate.pt`` is a list of plain dicts (image paths, crop sizes); it is read
with the same restricted unpickler the scan uses. Tensors inside come back as records, never
as data. (kohya's ``original_size`` needs no extra read: the npz reader keeps tiny arrays.)
"""

from __future__ import annotations

import os
from typing import Any

from cachedoctor.formats._source import FileSource
from cachedoctor.formats._unpickle import RestrictedUnpickler, zip_storage_ref
from cachedoctor.formats._zip import directory_of, is_zip, read_member
from cachedoctor.formats.interface import ReadError
from cachedoctor.formats.torch_zip import find_pickle

_PICKLE_LIMIT = 64 * 1024 * 1024


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
