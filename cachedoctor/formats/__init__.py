"""Readers that turn a cache file into metadata without executing it.

:func:`read_file` recognises a file by its bytes, never by its name: a plain pickle named
``.pt``, an npz named ``.latent`` and an extensionless temp file are all read for what they are.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from collections.abc import Iterator

from cachedoctor.cachenames import CACHE_SUFFIXES, claims_cache, special_type
from cachedoctor.formats import _deep, torch_shard
from cachedoctor.formats._source import BufferSource, FileSource, Source
from cachedoctor.formats._zip import directory_of, is_zip
from cachedoctor.formats.interface import FileMeta, FormatReader, MemberCrc, ReadError, TensorMeta, UnreadableFile
from cachedoctor.formats.npy import NpyReader
from cachedoctor.formats.npz import NpzReader
from cachedoctor.formats.plain_pickle import PlainPickleReader, named_before_break
from cachedoctor.formats.safetensors import SafetensorsReader
from cachedoctor.formats.torch_gzip import TorchGzipReader
from cachedoctor.formats.torch_legacy import TorchLegacyReader
from cachedoctor.formats.torch_tar import TorchTarReader
from cachedoctor.formats.torch_zip import TorchZipReader

#: Order matters: safetensors before the pickles (a 128-byte header length starts with 0x80,
#: pickle's PROTO opcode), the legacy torch reader before the plain-pickle reader, and the tar
#: reader before it too (torch.load tries tarfile first on every non-zip file).
READERS: tuple[FormatReader, ...] = (
    TorchZipReader(),
    NpzReader(),
    TorchGzipReader(),
    SafetensorsReader(),
    NpyReader(),
    TorchLegacyReader(),
    TorchTarReader(),
    PlainPickleReader(),
)


class Tally:
    """How many bytes :func:`read_file` calls took from a file: a header and a directory for a
    quick read, the whole file for a deep one (what a scan reports as ``io_bytes``)."""

    __slots__ = ("bytes", "size")

    def __init__(self) -> None:
        self.bytes = 0  # every read counted (the head is read again by a deep read, a small file's tail twice)
        self.size = 0  # the file's size, once it was opened

    @property
    def taken(self) -> int:
        """How much of the file was read, at most all of it (overlapping reads counted once)."""
        return min(self.bytes, self.size)


def read_file(path: str, *, deep: bool = False, tally: Tally | None = None, digest: bool = True) -> FileMeta | None:
    """Describe ``path``; ``None`` when its bytes are no cache format at all.

    Raises :class:`ReadError` for damaged files and :class:`UnreadableFile` when the system
    refuses the read, or when ``path`` is no regular file (problem ``special-file``, with its
    ``type``): it is opened without blocking, so a FIFO that replaced a file since the listing
    cannot hang the scan. In deep mode the whole file is read into memory once, but a large one
    only when it is a zip or a reader claims its first bytes: a file no reader knows is judged
    from its head as in a quick read (a 50 GB foreign file is not streamed to learn nothing).
    ``tally`` counts the bytes read; ``digest=False`` spares a deep read the file's xxh3
    (``FileMeta.digest`` is then ``None``), which only the state database keeps.
    """
    tally = tally if tally is not None else Tally()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        kind = special_type(st.st_mode)
        if kind is not None:
            os.close(fd)
            raise UnreadableFile("special-file", f"not a regular file ({kind}); not read", type=kind)
        try:
            size = tally.size = st.st_size
            if size == 0:
                raise ReadError("empty", "zero bytes: the write never happened or was cut off")
            if size <= _READ_INTO and deep:  # reading it whole costs about what sniffing it does
                data = _read_whole(fd, size)
                tally.bytes += len(data)
                return _dispatch(path, BufferSource(data, digest=digest), deep)
            head = FileSource(fd, size)
            try:
                if not deep or not _claimed(head):
                    return _dispatch(path, head, False)
            finally:
                tally.bytes += head.bytes_read
            with _mapped(fd, size) as buffer:
                tally.bytes += size  # pre-faulted: every page is read
                return _dispatch(path, BufferSource(buffer, digest=digest), deep)
        finally:
            os.close(fd)
    except io.UnsupportedOperation as exc:  # an OSError subclass, but a reader bug, not the disk
        raise ReadError("unparseable", f"reader failed: {exc}") from None
    except OSError as exc:
        raise UnreadableFile("unreadable", f"cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise ReadError("too-large", "file structure asks for more memory than is available") from None


def read_bytes(path: str, data: bytes | memoryview, *, deep: bool = False) -> FileMeta | None:
    """:func:`read_file` of ``data``, bytes already in memory as the file at ``path`` (repair
    holds the old file it has read, and the new bytes it is about to put there): the same
    readers and the same verdict, without reading the file again."""
    if len(data) == 0:
        raise ReadError("empty", "zero bytes: the write never happened or was cut off")
    try:
        return _dispatch(path, BufferSource(data), deep)
    except MemoryError:
        raise ReadError("too-large", "file structure asks for more memory than is available") from None


def _claimed(src: Source) -> bool:
    """Whether a deep read of the file can find more than a quick one: it is a zip (its CRCs),
    or some reader claims its first bytes. Anything else is judged from its head alone."""
    head = src.read_at(0, 64)
    return is_zip(head) or any(reader.claims(head, src) for reader in READERS)


_READ_INTO = MAPPED_FROM = 8 << 20  # deep reads up to this size go into one reused buffer, larger ones are mapped
_buffer = bytearray()
_base = 0  # where in _buffer a 64-byte boundary is


def _read_whole(fd: int, size: int) -> memoryview:
    """The file's bytes in a buffer reused from file to file: a fresh ``bytes`` of a few hundred
    KB costs the kernel a page fault per 4 KB, and the CRC, NaN and digest passes that follow
    find a reused buffer still in the CPU cache. The file starts ``_deep.placement`` bytes past
    a 64-byte boundary, so that its tensors start aligned (see there). Valid until the next
    call: what a reader keeps from the file (names, pickles, values) it copies out."""
    global _buffer, _base
    if len(_buffer) < size + 128:
        _buffer = bytearray(max(size + 128, 256 << 10))  # a new one: views of the old stay valid
        _base = -_address(_buffer) % 64
    start = _base + _deep.placement
    view = memoryview(_buffer)[start : start + size]
    return view[: os.preadv(fd, [view], 0)]  # a file that grew since its fstat is read as it was then


def _address(buffer: bytearray) -> int:
    import ctypes

    holder = (ctypes.c_char * 1).from_buffer(buffer)
    try:
        return ctypes.addressof(holder)
    finally:
        del holder  # releases the export: the buffer is never resized, only replaced


@contextlib.contextmanager
def _mapped(fd: int, size: int) -> Iterator[memoryview]:
    """The whole file mapped read-only and pre-faulted: deep mode's CRC, NaN and digest passes
    then read the page cache directly instead of a copy of it."""
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    mapping = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
    view = memoryview(mapping)
    try:
        yield view
    finally:
        view.release()
        try:
            mapping.close()
        except BufferError:  # a slice still referenced; the mapping closes when it is freed
            pass


_TAR, _PLAIN = READERS[-2], READERS[-1]


def _dispatch(path: str, src: Source, deep: bool) -> FileMeta | None:
    head = src.read_at(0, 64)
    if is_zip(head) and torch_shard.shard_number(path) is not None:
        return torch_shard.read(path, src, deep=deep)  # several archives, located by the index beside it
    for reader in READERS:
        if reader.claims(head, src):
            if head[:4] == b"PK\x03\x04":
                return reader.read(path, src, deep=deep)  # torch.load, np.load and pickle.load all see a zip
            return _with_polyglots(path, head, src, reader, deep)
    if is_zip(head):
        directory_of(src)  # a damaged zip says so; an intact foreign zip is named as such
        raise ReadError("unknown-format", "a zip archive that is neither a torch.save nor an np.savez file")
    if claims_cache(path):
        return named_before_break(path, src)
    return None


def _with_polyglots(path: str, head: bytes, src: Source, reader: FormatReader, deep: bool) -> FileMeta:
    """Read a non-zip file with the reader that claimed it, and also as what other loaders see.

    A file can be two formats at once: a valid safetensors file whose length field starts a
    pickle, a tar whose first member is named like npy magic, a tar header that is a pickle.
    torch.load tries ``tarfile`` first on any non-zip file and ``pickle.load`` reads any bytes,
    so whatever the tar and plain-pickle readers find dangerous is added to the verdict.
    """
    try:
        meta: FileMeta | None = reader.read(path, src, deep=deep)
        failure: ReadError | None = None
    except ReadError as exc:
        if exc.problem == "resource-bomb":
            raise
        meta, failure = None, exc
    unsafe: list[str] = list(meta.foreign_globals) if meta is not None else []
    loaders: list[str] = list(meta.loaders) if meta is not None else []
    for other in (_TAR, _PLAIN):
        if other is reader or (other is _PLAIN and reader.name == "torch-legacy") or not other.claims(head, src):
            continue  # (a legacy torch file's reader already walks every pickle in it)
        try:
            found = other.read(path, src, deep=False)
        except ReadError:
            continue  # harmless as that format, or a bomb only by that reading: the claimed reader's verdict stands
        for name in found.foreign_globals:
            if name not in unsafe:
                unsafe.append(name)
        loaders += [loader for loader in found.loaders if loader not in loaders]
    if meta is None:
        if not unsafe:
            assert failure is not None
            raise failure
        return FileMeta(
            path,
            reader.name,
            src.size,
            foreign_globals=tuple(unsafe),
            loaders=tuple(loaders),
            unreadable_reason=failure.message if failure else None,
        )
    if len(unsafe) == len(meta.foreign_globals):
        return meta
    from dataclasses import replace

    return replace(meta, foreign_globals=tuple(unsafe), loaders=tuple(loaders))


__all__ = [
    "CACHE_SUFFIXES",
    "MAPPED_FROM",
    "READERS",
    "FileMeta",
    "FormatReader",
    "MemberCrc",
    "ReadError",
    "Tally",
    "TensorMeta",
    "UnreadableFile",
    "claims_cache",
    "read_bytes",
    "read_file",
    "special_type",
]
