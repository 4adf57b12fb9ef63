"""Random access to a file's bytes: ``pread`` on a descriptor (quick scan) or a buffer.

Deep mode and gzip-wrapped files read from an in-memory buffer (an ``mmap`` or the inflated
bytes); the quick path reads only the few ranges it needs through ``os.pread``.
:func:`growing_window` reads a file's first bytes, more only while a walk over them runs out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from cachedoctor.formats._read_error import ReadError

if TYPE_CHECKING:
    from cachedoctor.formats._verdict import Sequence
    from cachedoctor.formats._zip_directory import ZipDirectory

R = TypeVar("R")


class Source:
    """``size`` bytes readable at any offset."""

    size: int
    # What the readers parse once per source (sniffing and reading share it); unset until first
    # use, so read them with ``getattr(src, name, None)``.
    _zip_directory: ZipDirectory
    _torch_directory: ZipDirectory | None  # miniz's view where zipfile's differs (_zip.torch_directory_of)
    _pickle_walk: Sequence | ReadError

    def read_at(self, offset: int, length: int) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def exact(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``, or a ``truncated`` read error."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ReadError("truncated", f"file ends before byte {offset + length}")
        data = self.read_at(offset, length)
        if len(data) != length:
            raise ReadError("truncated", f"file ends before byte {offset + length}")
        return data


class FileSource(Source):
    """``pread`` access that keeps the file's first block: torch.save writes ``data.pkl``
    first, so sniffing the magic and reading the pickle cost one read between them."""

    HEAD = 4096

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.head = os.pread(fd, self.HEAD, 0)
        self.bytes_read = len(self.head)  # what was taken from the file (``io_bytes`` of a scan)

    def read_at(self, offset: int, length: int) -> bytes:
        if offset + length <= len(self.head):
            return self.head[offset : offset + length]
        data = os.pread(self.fd, length, offset)
        self.bytes_read += len(data)
        return data


class BufferSource(Source):
    """The whole file in memory (a deep read). ``digest``: whether the readers take the file's
    xxh3 (``FileMeta.digest``); only the state database keeps it, so a scan without one, or a
    buffer that is only part of a file, spares that pass over every byte."""

    def __init__(self, buffer: bytes | memoryview, *, digest: bool = True) -> None:
        self.buffer = memoryview(buffer)
        self.size = len(self.buffer)
        self.digest = digest

    def read_at(self, offset: int, length: int) -> bytes:
        return bytes(self.buffer[offset : offset + length])

    def view(self, offset: int, length: int) -> memoryview:
        """Zero-copy slice for deep checks (CRC, NaN) over large records."""
        if offset < 0 or offset + length > self.size:
            raise ReadError("truncated", f"file ends before byte {offset + length}")
        return self.buffer[offset : offset + length]


def growing_window(
    src: Source, limit: int, walk: Callable[[bytes], R], truncated: Callable[[R], bool]
) -> tuple[bytes, R]:
    """Run ``walk`` on the file's first bytes, reading more (up to ``limit``) while it reports
    running out: the pickles of a file come first, and are small next to its tensors."""
    size = min(src.size, limit)
    length = min(size, 4096)  # what a quick read holds already (FileSource.HEAD): most walks stop in it
    while True:
        window = src.read_at(0, length)
        result = walk(window)
        if length >= size or not truncated(result):
            return window, result
        length = min(size, length * 16)
