"""torch.save zip archives (``.pt``), read from the central directory and ``data.pkl`` only.

Quick mode reads the end records, the central directory and ``data.pkl``: two or three
``pread`` calls per file, no tensor bytes. Deep mode also CRC-checks every member (torch.load
never does) and counts NaN/Inf in each floating tensor's view.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from functools import lru_cache
from typing import Any

from cachedoctor.formats import _deep
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._tensor_values import tensor_values
from cachedoctor.formats._torch_damage import damage_error, pickle_crc_failure
from cachedoctor.formats._torch_pickles import (  # noqa: F401 (TORCHSCRIPT re-exported)
    TORCHSCRIPT,
    find_pickle,
    looks_like_torch,
    pickle_bytes,
    screen_members,
)
from cachedoctor.formats._unpickle import PickleBomb, RestrictedUnpickler, Walked, walk, zip_storage_ref
from cachedoctor.formats._verdict import LOADERS, NP_LOAD, bomb, check_size, merge, screen
from cachedoctor.formats._zip import (
    ZipDirectory,
    ZipMember,
    directory_of,
    fold,
    is_zip,
    read_member,
    torch_directory_of,
)
from cachedoctor.formats._zip_member import data_whatever_named
from cachedoctor.formats.interface import FileMeta, FormatReader, MemberCrc, ReadError, TensorMeta
from cachedoctor.formats.npz import check_bombs, screen_arrays, with_arrays
from cachedoctor.lifetime import reraise_interrupt


def describe(
    path: str,
    fmt: str,
    src: Source,
    directory: ZipDirectory,
    *,
    deep: bool,
    loaders: tuple[str, ...] = LOADERS["torch-zip"],
) -> FileMeta:
    """Metadata of a torch.save zip archive whose central directory is ``directory``, judged
    as torch.load reads it and as ``np.load`` does (which reads any zip as an npz: every member
    that starts with the ``.npy`` magic, an object array's pickle included).

    Damage before intent: ``data.pkl`` is read whole anyway, so its CRC-32 is checked (miniz
    does not). A damaged pickle that reads as a bomb or does not unpickle is ``bad-crc``
    (corrupt-archive, recomputable), its content verdict kept in ``content``; one that names
    globals outside the allow-list stays unsafe (torch.load runs it, CRC or not), the CRC
    failure reported beside it."""
    check_bombs(directory, path)
    read: list[tuple[ZipMember, bytes]] = []  # data.pkl, as _describe read it
    try:
        meta = _describe(path, fmt, src, directory, deep=deep, loaders=loaders, read=read)
    except ReadError as exc:
        arrays = screen_arrays(src, directory) if exc.problem != "resource-bomb" else []
        if arrays:  # np.load reaches them whatever torch.load makes of the archive
            return FileMeta(
                path, fmt, src.size, foreign_globals=tuple(arrays), loaders=(NP_LOAD,), unreadable_reason=exc.message
            )
        damaged = pickle_crc_failure(src, directory)
        reached = exc.details.get("unsafe")  # names a loader imports before the bomb: intent whatever the CRC
        if damaged is not None and exc.problem in ("resource-bomb", "bad-pickle") and not reached:
            raise damage_error(damaged, exc) from None
        raise
    if read and zlib.crc32(read[0][1]) != read[0][0].crc:
        damaged = MemberCrc(read[0][0].name, read[0][0].crc, zlib.crc32(read[0][1]))
        if all(b.name != damaged.name for b in meta.crc_mismatches):
            meta = replace(meta, crc_mismatches=(damaged, *meta.crc_mismatches))
    return with_arrays(meta, screen_arrays(src, directory, *(read[0] if read else (None, b""))))


def _describe(
    path: str,
    fmt: str,
    src: Source,
    directory: ZipDirectory,
    *,
    deep: bool,
    loaders: tuple[str, ...],
    read: list[tuple[ZipMember, bytes]],
) -> FileMeta:
    index = directory.torch_index()
    ambiguous = directory.colliding() if len(index) != len(directory.entries) else ()
    found = find_pickle(directory, index)
    data: bytes | None = None
    if found is not None:
        check_size(found[1].name, found[1].size)
        try:
            data = read_member(src, found[1], limit=LIMITS.pickle_bytes)
        except ReadError as exc:
            if exc.problem != "ambiguous-member":
                raise
            ambiguous += tuple(exc.details.get("members", ()))
            data = data_whatever_named(src, found[1])
        read.append((found[1], data))
    if found is not None and data is not None and len(data) <= _MEMO_BYTES:
        verdict, walked, failure, too_big = _verdict(data)  # one memoised look-up for the usual archive
        unsafe = list(verdict)
        if len(index) != len(directory.entries) or "\0".join(index).count(".pkl") > 1:
            merge(unsafe, screen_members(src, directory, found[1], data, index))
    else:
        unsafe = screen_members(src, directory, found[1] if found else None, data, index)
        walked = failure = too_big = None
        if found is not None and data is not None:
            walked, failure, too_big = _unpickle(data)
    if found is None or data is None:
        if unsafe:
            return FileMeta(
                path,
                fmt,
                src.size,
                foreign_globals=tuple(unsafe),
                loaders=loaders,
                ambiguous=ambiguous,
                unreadable_reason="no data.pkl where torch.load looks for it",
            )
        pickle_bytes(src, directory)  # raises missing-data-pkl
    assert found is not None and data is not None
    prefix = found[0]
    if too_big is not None:
        raise bomb(found[1].name, too_big)
    if failure is not None:
        if unsafe or ambiguous:
            return FileMeta(
                path,
                fmt,
                src.size,
                foreign_globals=tuple(unsafe),
                unreadable_reason=failure,
                loaders=loaders if unsafe else (),
                ambiguous=ambiguous,
            )
        raise ReadError("bad-pickle", f"data.pkl does not unpickle ({failure})")
    assert walked is not None

    deep_src = src if deep and isinstance(src, BufferSource) else None
    try:
        layout = _deep.Members(deep_src, directory) if deep_src is not None else None
    except ReadError as exc:
        if not unsafe:
            raise
        # damage a deep read finds elsewhere in the archive excuses nothing torch.load runs
        return FileMeta(
            path, fmt, src.size, foreign_globals=tuple(unsafe), unreadable_reason=exc.message, loaders=loaders
        )
    tensors: list[TensorMeta] = []
    missing: list[str] = []
    for key, rec in walked.tensors:
        record = index.get(fold(f"{prefix}data/{rec.storage.key}"))
        if record is None and rec.storage.key not in missing:
            missing.append(rec.storage.key)
        nonfinite = stats = None
        if layout is not None and record is not None and record.method == 0 and record.name in layout.starts:
            assert deep_src is not None
            buffer = deep_src.view(layout.starts[record.name], record.size)
            nonfinite, stats = tensor_values(
                key, buffer, rec.dtype, rec.storage_elements, rec.offset, rec.size, rec.stride
            )
        tensors.append(rec.meta(key, None if record is None else record.size, nonfinite, stats))

    crc_bad: tuple[MemberCrc, ...] = ()
    file_digest: str | None = None
    if layout is not None:
        assert deep_src is not None
        crc_bad = layout.crc_bad
        file_digest = _deep.file_digest(deep_src)
        ambiguous += tuple(n for n in layout.renamed if n not in ambiguous)
    return FileMeta(
        path,
        fmt,
        src.size,
        container=walked.container,
        tensors=tuple(tensors),
        foreign_globals=tuple(unsafe),
        missing_records=tuple(missing),
        deep=deep,
        crc_mismatches=crc_bad,
        digest=file_digest,
        loaders=loaders if unsafe else (),
        ambiguous=ambiguous,
        texts=walked.texts,
    )


_MEMO_BYTES = 64 * 1024


@lru_cache(maxsize=1024)
def _verdict(data: bytes) -> tuple[tuple[str, ...], Walked | None, str | None, str | None]:
    """``(unsafe globals, tensors, failure, resource bomb)`` of one small ``data.pkl``, memoised
    on its bytes: files of one aspect bucket (or one text encoder) carry byte-identical pickles,
    so a large cache walks and unpickles a handful of distinct ones. A bomb raises."""
    unsafe = screen("data.pkl", data).unsafe
    return (unsafe, *_unpickle(data))


def _unpickle(data: bytes) -> tuple[Walked | None, str | None, str | None]:
    """Restricted unpickle of ``data.pkl``: ``(tensors, failure, resource bomb)``.

    Runs only on pickles the static walk has passed (no resource bomb reaches it).
    """
    unpickler = RestrictedUnpickler(data, zip_storage_ref)
    try:
        walked = walk(unpickler.load())
    except PickleBomb as exc:
        return None, None, str(exc)
    except MemoryError:
        raise  # the reader's memory cap: the scan's verdict on it (scan/_memcap.py), not damage
    except Exception as exc:  # hostile or damaged pickles raise anything: catch broadly
        reraise_interrupt(exc)
        return None, f"{type(exc).__name__}: {str(exc)[:120]}", None
    return walked, None, None


class TorchZipReader(FormatReader):
    name = "torch-zip"

    def claims(self, head: bytes, src: Source) -> bool:
        if not is_zip(head):
            return False
        directory = torch_directory_of(src)  # miniz's offsets: zipfile's "concat" is no torch archive
        return directory is not None and looks_like_torch(directory)

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        directory = torch_directory_of(src)
        assert directory is not None
        meta = describe(path, self.name, src, directory, deep=deep)
        try:
            other = directory_of(src)
        except ReadError:
            return meta  # zipfile cannot read it: np.load cannot either
        # np.load reads the archive at zipfile's offsets: maybe another set of members
        return meta if other is directory else with_arrays(meta, screen_arrays(src, other))


def read_torch_object(path: str) -> Any:
    """The object a torch.save zip archive holds, with tensors as inert records
    (:func:`_torch_object.read_object`). Imported here, not at the top: only a layout reading a
    trainer's own index needs it, never a scan's reader."""
    from cachedoctor.formats._torch_object import read_object

    return read_object(path)
