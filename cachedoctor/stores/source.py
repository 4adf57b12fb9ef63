"""An object's bytes for the format readers, fetched by ranges (the quick scan's remote twin of
``formats._source.FileSource``).

A quick read needs the first bytes (magic, ``data.pkl`` or a safetensors header) and, for a
zip, the end records and central directory. The first request takes the whole object when it
is no bigger than the head window (one request, the usual case for a latent), else its first
64 KB (torch.save writes ``data.pkl`` first); a read
past it takes the window at the object's end, then any other range exactly. Each window is
one ranged GET conditional on the listed ETag, so bytes from two versions never mix.
"""

from __future__ import annotations

from cachedoctor.formats._source import Source
from cachedoctor.formats._verdict import bomb
from cachedoctor.formats.interface import ReadError
from cachedoctor.stores.interface import ObjectInfo, Store

HEAD_WINDOW = 256 << 10  # objects up to this size take one request
FIRST_WINDOW = 64 << 10  # the start of a larger object: magic, data.pkl, a safetensors header
TAIL_WINDOW = 64 << 10  # a zip's end record, comment and (usually) central directory
MAX_REQUESTS = 16  # ranges of one object; past this the object is read whole once, or refused
WHOLE_LIMIT = 64 << 20  # the largest object read whole once its ranges run out


class RangeSource(Source):
    """``info.size`` bytes of one object, read by windows kept in memory."""

    def __init__(self, store: Store, info: ObjectInfo, head: int = HEAD_WINDOW) -> None:
        self.store = store
        self.info = info
        self.size = info.size
        self.windows: list[tuple[int, bytes]] = []
        self.bytes_read = 0
        self.requests = 0
        self._fetch(0, self.size if self.size <= head else FIRST_WINDOW)

    def _fetch(self, start: int, end: int) -> bytes:
        if self.requests >= MAX_REQUESTS:
            return self._whole()[start:end]
        self.requests += 1
        data = self.store.read_range(self.info, start, end)
        if len(data) != end - start:
            raise ReadError("truncated", f"object ends before byte {end}")
        self.bytes_read += len(data)
        self.windows.append((start, data))
        return data

    def _whole(self) -> bytes:
        """The whole object in one request, kept: a hostile archive (hundreds of pickles spread
        over the object) costs ``MAX_REQUESTS + 1`` requests, not one per member. A read error
        here would be swallowed member by member (a damaged extra pickle is skipped), so an
        object too large to hold is a resource bomb, which every reader passes on."""
        if self.size > WHOLE_LIMIT:
            raise bomb(
                self.info.url, f"its readers asked for more than {MAX_REQUESTS} ranges of a {self.size}-byte object"
            )
        if self.requests > MAX_REQUESTS:  # the whole read came back short once: no more requests
            raise ReadError("truncated", f"object ends before byte {self.size}")
        self.requests += 1
        data = self.store.read_range(self.info, 0, self.size)  # only read_range: callers wrap it
        if len(data) != self.size:
            raise ReadError("truncated", f"object ends before byte {self.size}")
        self.bytes_read += len(data)
        self.windows.insert(0, (0, data))
        return data

    def read_at(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        for start, data in self.windows:
            if start <= offset and end <= start + len(data):
                return data[offset - start : end - start]
        if end > self.size - TAIL_WINDOW and offset >= self.size - TAIL_WINDOW * 4:
            start = max(0, min(offset, self.size - TAIL_WINDOW))
            data = self._fetch(start, self.size)
            return data[offset - start : end - start]
        return self._fetch(offset, end)
