"""gzip-wrapped torch.save files (SimpleTuner ``--compress_disk_cache``, magic ``1f 8b``).

The whole file is inflated in memory (there is no index to seek in), then read as the torch
zip archive inside. gzip's own CRC-32 and length trailer are verified by the inflate, so a
flipped byte is caught even in quick mode.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

from cachedoctor.formats import _deep, torch_zip
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._zip import directory_of, is_zip
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError

_MAX_INFLATED = 2 * 1024 ** 3


def inflate(data: bytes) -> bytes:
    """gunzip ``data`` (one member), verifying its trailer; bounded against gzip bombs."""
    engine = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = engine.decompress(data, _MAX_INFLATED)
    except zlib.error as exc:
        raise ReadError("bad-gzip", f"gzip stream is damaged ({exc})") from None
    if engine.unconsumed_tail:
        raise ReadError("too-large", "gzip stream inflates past the size limit")
    if not engine.eof:
        raise ReadError("truncated", "gzip stream ends early: the file is truncated")
    if engine.unused_data:
        raise ReadError("bad-gzip", f"{len(engine.unused_data)} bytes after the gzip stream")
    return out


class TorchGzipReader(FormatReader):
    name = "torch-gzip"

    def claims(self, head: bytes, src: Source) -> bool:
        return head[:2] == b"\x1f\x8b"

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        raw = src.exact(0, src.size)
        inner = BufferSource(inflate(raw))
        head = inner.read_at(0, 4)
        if not is_zip(head) or not torch_zip.looks_like_torch(directory_of(inner)):
            raise ReadError("bad-gzip", "gzip file that does not wrap a torch.save archive")
        meta = torch_zip.describe(path, self.name, inner, directory_of(inner), deep=deep)
        meta = replace(meta, size=src.size)
        if deep:
            meta = replace(meta, digest=_deep.digest(memoryview(raw)))
        return meta
