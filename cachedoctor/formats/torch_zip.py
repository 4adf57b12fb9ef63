"""torch.save zip archives (``.pt``), read from the central directory and ``data.pkl`` only.

Quick mode reads the end records, the central directory and ``data.pkl``: two or three
``pread`` calls per file, no tensor bytes. Deep mode also CRC-checks every member (torch.load
never does) and counts NaN/Inf in each floating tensor's view.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from cachedoctor.formats import _deep
from cachedoctor.formats._dtypes import ITEMSIZE
from cachedoctor.formats._source import BufferSource, FileSource, Source
from cachedoctor.formats._unpickle import RestrictedUnpickler, StorageRef, Walked, walk, zip_storage_ref
from cachedoctor.formats._zip import ZipDirectory, directory_of, is_zip, read_member
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta
from cachedoctor.lifetime import reraise_interrupt

_PICKLE_LIMIT = 256 * 1024 * 1024


def find_pickle(directory: ZipDirectory) -> tuple[str, str] | None:
    """``(prefix, member name)`` of ``<arch>/data.pkl``, or ``None``."""
    for name in directory.members:
        if name == "data.pkl" or name.endswith("/data.pkl"):
            return name[: -len("data.pkl")], name
    return None


def looks_like_torch(directory: ZipDirectory) -> bool:
    """A torch.save archive, even one that died before writing ``data.pkl``."""
    for name in directory.members:
        tail = name.rsplit("/", 1)[-1]
        if tail in ("data.pkl", "version", ".format_version", "byteorder") or "/data/" in name:
            return True
    return False


def pickle_bytes(src: Source, directory: ZipDirectory) -> tuple[str, bytes]:
    """``(record prefix, data.pkl's bytes)``, or ``missing-data-pkl``."""
    found = find_pickle(directory)
    if found is None:
        raise ReadError("missing-data-pkl",
                        "zip archive without data.pkl: a torch.save that died part way (failed locating file data.pkl)")
    prefix, pkl_name = found
    return prefix, read_member(src, directory.members[pkl_name], limit=_PICKLE_LIMIT)


def describe(path: str, fmt: str, src: Source, directory: ZipDirectory, *, deep: bool) -> FileMeta:
    """Metadata of a torch.save zip archive whose central directory is ``directory``."""
    prefix, data = pickle_bytes(src, directory)
    walked, foreign, failure = _unpickle(data)
    if failure is not None:
        if foreign:
            return FileMeta(path, fmt, src.size, foreign_globals=foreign, unreadable_reason=failure)
        raise ReadError("bad-pickle", f"data.pkl does not unpickle ({failure})")
    assert walked is not None

    deep_buffer = deep and isinstance(src, BufferSource)
    starts = _deep.member_starts(src, directory) if deep_buffer else {}
    tensors: list[TensorMeta] = []
    missing: list[str] = []
    for key, rec in walked.tensors:
        record = directory.members.get(f"{prefix}data/{rec.storage.key}")
        itemsize = ITEMSIZE.get(rec.dtype, 1)
        numel = _storage_elements(rec.storage, itemsize)
        if record is None and rec.storage.key not in missing:
            missing.append(rec.storage.key)
        nonfinite = None
        if deep_buffer and record is not None and record.method == 0:
            buffer = src.view(starts[record.name], record.size)  # type: ignore[union-attr]
            nonfinite = _deep.count_nonfinite(buffer, rec.dtype, numel, rec.offset, rec.size, rec.stride)
        tensors.append(TensorMeta(
            key=key, shape=rec.size, dtype=rec.dtype, itemsize=itemsize, stride=rec.stride,
            offset=rec.offset, storage=rec.storage.key, storage_numel=numel,
            record_bytes=None if record is None else record.size, location=rec.storage.location,
            nonfinite=nonfinite))

    crc_bad: tuple = ()
    file_digest = None
    if deep_buffer:
        crc_bad = _deep.crc_mismatches(src, directory, starts)  # type: ignore[arg-type]
        file_digest = _deep.digest(src.buffer)  # type: ignore[union-attr]
    return FileMeta(path, fmt, src.size, container=walked.container, tensors=tuple(tensors),
                    foreign_globals=foreign, missing_records=tuple(missing),
                    deep=deep, crc_mismatches=crc_bad, digest=file_digest)


@lru_cache(maxsize=1024)
def _unpickle(data: bytes) -> tuple[Walked | None, tuple[str, ...], str | None]:
    """Restricted unpickle of ``data.pkl``: ``(tensors, foreign globals, failure)``.

    Memoised on the pickle's bytes: files of one aspect bucket (or one text encoder) carry
    byte-identical pickles, so a large cache unpickles a handful of distinct ones.
    """
    unpickler = RestrictedUnpickler(data, zip_storage_ref)
    try:
        walked = walk(unpickler.load())
    except Exception as exc:  # hostile or damaged pickles raise anything: catch broadly
        reraise_interrupt(exc)
        return None, tuple(unpickler.foreign), f"{type(exc).__name__}: {str(exc)[:120]}"
    return walked, tuple(unpickler.foreign), None


def _storage_elements(ref: StorageRef, itemsize: int) -> int:
    return ref.numel if ref.dtype is not None else ref.numel // max(itemsize, 1)


class TorchZipReader(FormatReader):
    name = "torch-zip"

    def claims(self, head: bytes, src: Source) -> bool:
        return is_zip(head) and looks_like_torch(directory_of(src))

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        return describe(path, self.name, src, directory_of(src), deep=deep)


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
        _, data = pickle_bytes(src, directory_of(src))
    unpickler = RestrictedUnpickler(data, zip_storage_ref)
    try:
        obj = unpickler.load()
    except Exception as exc:  # damaged or hostile pickles raise anything
        reraise_interrupt(exc)
        raise ReadError("bad-pickle", f"data.pkl does not unpickle ({type(exc).__name__})") from None
    if unpickler.foreign:
        raise ReadError("bad-pickle", f"data.pkl names {unpickler.foreign[0]}, which a cache index never holds")
    return obj
