"""An inventory data file in a bucket as a seekable, read-only file, fetched by ranged reads.

A data file can be gigabytes (S3 splits an inventory into files of up to a few GB); it is never
held whole: gzip streams it through :data:`CHUNK`-sized reads, pyarrow seeks to the footer and
reads one row group at a time. Every read is conditional on the version its HEAD saw
(``Store.read_range``), so an inventory rewritten while being read is an error, not a mixture.
"""

from __future__ import annotations

import io

from cachedoctor.stores.interface import (
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    Store,
    StoreError,
    TransientError,
)

#: Bytes per ranged read of a sequential pass (the gzip stream of a CSV file).
CHUNK = 8 << 20


class ObjectStream(io.RawIOBase):
    """``info``'s bytes through ``store.read_range``; reads past the end are empty."""

    def __init__(self, store: Store, info: ObjectInfo) -> None:
        super().__init__()
        self.store = store
        self.info = info
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.info.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self.position = base + offset
        return self.position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        want = min(len(buffer), self.info.size - self.position)
        if want <= 0:
            return 0
        data = self._range(self.position, self.position + want)
        n = len(data)
        buffer[:n] = data
        self.position += n
        return n

    def _range(self, start: int, end: int) -> bytes:
        try:
            return self.store.read_range(self.info, start, end)
        except (ObjectChanged, ObjectGone):
            raise StoreError(self.info.url, "the inventory data file changed while being read; rerun") from None
        except TransientError as exc:
            raise RemoteError(self.info.url, f"cannot be read ({exc}); try again later") from None


def buffered(stream: io.RawIOBase) -> io.BufferedReader:
    """``stream`` read ahead by :data:`CHUNK` (one request per chunk in a sequential pass)."""
    return io.BufferedReader(stream, buffer_size=CHUNK)


__all__ = ["CHUNK", "ObjectStream", "buffered"]
