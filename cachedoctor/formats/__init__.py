"""Readers that turn a cache file into metadata without executing it.

:func:`read_file` recognises a file by its bytes, never by its name: a plain pickle named
``.pt``, an npz named ``.latent`` and an extensionless temp file are all read for what they are.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
from typing import Iterator

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
    TorchZipReader(), NpzReader(), TorchGzipReader(), SafetensorsReader(), NpyReader(),
    TorchLegacyReader(), TorchTarReader(), PlainPickleReader(),
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


def _dispatch(path: str, src: Source, deep: bool) -> FileMeta | None:
    head = src.read_at(0, 64)
    for reader in READERS:
        if reader.claims(head, src):
            return reader.read(path, src, deep=deep)
    if is_zip(head):
        directory_of(src)  # a damaged zip says so; an intact foreign zip is named as such
        raise ReadError("unknown-format", "a zip archive that is neither a torch.save nor an np.savez file")
    return None


__all__ = [
    "CACHE_SUFFIXES", "FileMeta", "FormatReader", "MemberCrc", "READERS", "ReadError", "TensorMeta",
    "UnreadableFile", "claims_cache", "read_file",
]
