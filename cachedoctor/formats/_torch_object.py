"""The object a torch.save zip archive holds, for layouts that read a trainer's own index
files (OneTrainer's): restricted-unpickled, tensors as inert records, never trusted."""

from __future__ import annotations

import os
from typing import Any

from cachedoctor.formats._source import FileSource
from cachedoctor.formats._torch_pickles import pickle_bytes, screen_members
from cachedoctor.formats._unpickle import RestrictedUnpickler, zip_storage_ref
from cachedoctor.formats._zip import directory_of, is_zip
from cachedoctor.formats.interface import ReadError
from cachedoctor.lifetime import reraise_interrupt


def read_object(path: str) -> Any:
    """Raises :class:`ReadError` when the file is no readable torch archive, or when its pickle
    names anything outside the allow-list (such a file is reported by the scan, not trusted)."""
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        src = FileSource(handle.fileno(), size)
        if not is_zip(src.read_at(0, 4)):
            raise ReadError("unknown-format", "not a torch.save zip archive")
        directory = directory_of(src)
        _, data = pickle_bytes(src, directory)
        unsafe = screen_members(src, directory, None, None)
    if unsafe:
        raise ReadError("bad-pickle", f"the archive names {unsafe[0]}, which a cache index never holds")
    unpickler = RestrictedUnpickler(data, zip_storage_ref)
    try:
        obj = unpickler.load()
    except Exception as exc:  # damaged or hostile pickles raise anything
        reraise_interrupt(exc)
        raise ReadError("bad-pickle", f"data.pkl does not unpickle ({type(exc).__name__})") from None
    if unpickler.foreign:
        raise ReadError("bad-pickle", f"data.pkl names {unpickler.foreign[0]}, which a cache index never holds")
    return obj
