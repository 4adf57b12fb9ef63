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

from cachedoctor.formats._source import BufferSource, FileSource, Source
from cachedoctor.formats._zip import directory_of, is_zip
from cachedoctor.formats.interface import FileMeta, FormatReader, MemberCrc, ReadError, TensorMeta, UnreadableFile
from cachedoctor.formats.npy import NpyReader
from cachedoctor.formats.npz import NpzReader
from cachedoctor.formats.plain_pickle import PlainPickleReader
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

#: Names that claim to be a cache file: unrecognised bytes under these names are corruption,
#: under any other name a foreign file that a scan skips.
CACHE_SUFFIXES = frozenset({".pt", ".pth", ".npz", ".npy", ".safetensors", ".ckpt", ".bin", ".latent"})


def claims_cache(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in CACHE_SUFFIXES


def read_file(path: str, *, deep: bool = False) -> FileMeta | None:
    """Describe ``path``; ``None`` when its bytes are no cache format at all.

    Raises :class:`ReadError` for damaged files and :class:`UnreadableFile` when the system
    refuses the read. In deep mode the whole file is read into memory once.
    """
    try:
        with open(path, "rb", buffering=0) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                raise ReadError("empty", "zero bytes: the write never happened or was cut off")
            if not deep:
                return _dispatch(path, FileSource(handle.fileno(), size), deep)
            if size < _MMAP_FROM:
                return _dispatch(path, BufferSource(handle.read()), deep)
            with _mapped(handle.fileno(), size) as buffer:
                return _dispatch(path, BufferSource(buffer), deep)
    except io.UnsupportedOperation as exc:  # an OSError subclass, but a reader bug, not the disk
        raise ReadError("unparseable", f"reader failed: {exc}") from None
    except OSError as exc:
        raise UnreadableFile("unreadable", f"cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise ReadError("too-large", "file structure asks for more memory than is available") from None


_MMAP_FROM = 256 * 1024


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
    for reader in READERS:
        if reader.claims(head, src):
            if head[:4] == b"PK\x03\x04":
                return reader.read(path, src, deep=deep)  # torch.load, np.load and pickle.load all see a zip
            return _with_polyglots(path, head, src, reader, deep)
    if is_zip(head):
        directory_of(src)  # a damaged zip says so; an intact foreign zip is named as such
        raise ReadError("unknown-format", "a zip archive that is neither a torch.save nor an np.savez file")
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
    "READERS",
    "FileMeta",
    "FormatReader",
    "MemberCrc",
    "ReadError",
    "TensorMeta",
    "UnreadableFile",
    "claims_cache",
    "read_file",
]
