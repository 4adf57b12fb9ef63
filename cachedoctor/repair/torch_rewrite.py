"""Lossless rewrites of the common torch.save files without torch: the bytes torch would write.

A ``rewrite-cpu`` or ``clone-storage`` of a file is ``torch.save`` of what ``torch.load`` read,
each tensor moved to the cpu (or cloned). For a torch zip archive holding one tensor or a dict
of tensors (SimpleTuner's latents and text embeds, most caches) that is a mechanical change: the
storages' bytes stay as they are (a clone keeps the bytes its view covers), the pickle names
``cpu`` for each storage, and the archive is laid out again. Done here from the bytes read
(``torch_pickle.py``, ``torch_pickle_write.py``, ``torch_archive.py``), it costs a tenth of torch.load and torch.save, and
a run whose files all take this path never imports torch (about 1.5 s of CPU).

The result is byte for byte what the torch path writes: the tests compare the two on every
case this path takes. Where it could differ, :func:`rewrite_zip` returns ``None`` and the
caller goes through torch as before: a file outside what ``torch_pickle.read_pickle`` follows,
an archive that is not plainly torch's (``torch_archive.records_of``), a tensor whose view
leaves its storage (torch.load refuses it), a clone of a view that is not contiguous, a torch
whose writer the tests have not held this to (:data:`VERIFIED_TORCH`), a platform whose torch
hashes names another way (not Linux), or torch's save settings changed in this process.

The tensors written are compared with those read before the bytes are returned: the pickle
written is read back, and its structure, dtypes, shapes, strides and offsets must be the old
ones (a clone's offset 0), each storage holding the very bytes read (the torch path's test of a
tensor moved to the cpu in the same memory). The caller then judges the whole new file deep
(``verify.py``: CRCs of every record, structure, NaN/Inf).
"""

from __future__ import annotations

import sys
from functools import cache
from math import prod

from cachedoctor.formats._deep import contiguous_strides
from cachedoctor.repair.torch_archive import ALIGNMENT, records_of, write_archive
from cachedoctor.repair.torch_pickle import STORAGE_ITEMSIZE, Saved, Stored, Tensor, read_pickle
from cachedoctor.repair.torch_pickle_write import write_pickle

#: torch releases (major, minor) whose torch.save the tests found this module to reproduce.
VERIFIED_TORCH = frozenset({(2, 13)})


def rewrite_zip(raw: bytes, clone: bool) -> bytes | None:
    """The new bytes of a ``rewrite-cpu`` (``clone``: ``clone-storage``) of the torch zip archive
    ``raw``, as torch.save would write them; ``None``: rewrite it with torch."""
    if not _exact_here():
        return None
    taken = records_of(raw)
    if taken is None:
        return None
    _folder, old = taken
    if bytes(old.get("byteorder", b"little")) != b"little" or bytes(old.get("version", b"3\n")) != b"3\n":
        return None
    old_pickle = old.get("data.pkl")
    saved = read_pickle(old_pickle) if old_pickle is not None else None
    if saved is None:
        return None
    new_keys: dict[str, str] = {}
    data: dict[str, memoryview] = {}
    moved: list[Tensor] = []
    for t in saved.tensors():
        record = old.get(f"data/{t.storage.key}")
        itemsize = STORAGE_ITEMSIZE[t.storage.cls]
        n = prod(t.size)
        if record is None or len(record) != t.storage.numel * itemsize or n == 0 or not _within(t):
            return None
        if clone:  # Tensor.clone() of a contiguous view: its own storage of exactly its elements
            if t.stride != contiguous_strides(t.size):
                return None
            key = str(len(data))
            data[key] = record[t.offset * itemsize : (t.offset + n) * itemsize]
            moved.append(Tensor(Stored(key, t.storage.cls, "cpu", n), 0, t.size, t.stride))
            continue
        key = new_keys.get(t.storage.key, str(len(data)))
        new_keys[t.storage.key] = key
        data[key] = record
        moved.append(Tensor(Stored(key, t.storage.cls, "cpu", t.storage.numel), t.offset, t.size, t.stride))
    if saved.items is None:
        result = Saved(tensor=moved[0])
    else:
        result = Saved(items=tuple(zip((k for k, _t in saved.items), moved, strict=True)), ordered=saved.ordered)
    pickled = write_pickle(result)
    if not _same(saved, result, pickled, clone):
        return None
    header = [("data.pkl", pickled), (".format_version", b"1"), (".storage_alignment", b"64"), ("byteorder", b"little")]
    return write_archive([*header, *((f"data/{k}", v) for k, v in data.items())])


def _within(t: Tensor) -> bool:
    """The view lies inside its storage (torch.load refuses one that does not)."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.size, t.stride, strict=True))
    return t.offset + span <= t.storage.numel


def _same(saved: Saved, result: Saved, pickled: bytes, clone: bool) -> bool:
    """The pickle written, read back, holds ``saved``'s tensors: the same names in the same
    order, types, shapes, strides and offsets (a clone's 0), each on the cpu, over the storage
    ``result`` gives it, whose bytes are the very bytes read (or for a clone, the part its view
    covers), as the torch path's comparison finds a tensor moved to the cpu in the same memory.
    The archive around them is the deep judgement's to read (CRCs, structure)."""
    again = read_pickle(pickled)
    if again != result or again.ordered != saved.ordered:
        return False
    old_keys = [k for k, _ in saved.items] if saved.items is not None else None
    new_keys = [k for k, _ in again.items] if again.items is not None else None
    if old_keys != new_keys:
        return False
    for a, b in zip(saved.tensors(), again.tensors(), strict=True):
        if (a.storage.cls, a.size, a.stride, 0 if clone else a.offset) != (b.storage.cls, b.size, b.stride, b.offset):
            return False
        if b.storage.location != "cpu":
            return False
    return True


def _exact_here() -> bool:
    """Whether torch.save here writes what this module writes (see the module's docstring)."""
    if not _platform_and_release():
        return False
    torch = sys.modules.get("torch")
    if torch is None:
        return True  # not imported: its settings are the defaults
    try:
        settings = torch.utils.serialization.config.save
        skipping = torch.serialization._serialization_tls.skip_data
        return bool(settings.compute_crc32 and settings.storage_alignment == ALIGNMENT and not skipping)
    except AttributeError:
        return False


@cache
def _platform_and_release() -> bool:
    if sys.platform != "linux" or sys.byteorder != "little":
        return False
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = tuple(int(part) for part in version("torch").split("+")[0].split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return release in VERIFIED_TORCH


__all__ = ["VERIFIED_TORCH", "rewrite_zip"]
