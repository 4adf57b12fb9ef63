"""gzip-wrapped torch.save files (SimpleTuner ``--compress_disk_cache``, magic ``1f 8b``).

The whole file is inflated in memory (there is no index to seek in), then read as whatever is
inside: SimpleTuner's reader gunzips and hands the bytes to ``torch.load``, so a legacy torch
file, a tar-format one or a plain pickle inside runs its payload as surely as a torch zip does,
and each is read by its own reader. gzip's own CRC-32 and length trailer are verified by the
inflate, so a flipped byte is caught even in quick mode.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

from cachedoctor.formats import _deep, torch_zip
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._verdict import GUNZIP_LOAD
from cachedoctor.formats._zip import directory_of, is_zip
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError
from cachedoctor.formats.plain_pickle import PlainPickleReader
from cachedoctor.formats.torch_legacy import TorchLegacyReader
from cachedoctor.formats.torch_tar import TorchTarReader

_MAX_INFLATED = 512 * 1024**2
_INNER = (TorchLegacyReader(), TorchTarReader(), PlainPickleReader())


def inflate(data: bytes) -> bytes:
    """gunzip ``data``, every member of it as ``gzip.decompress`` reads them (concatenated),
    verifying each trailer; bounded against gzip bombs."""
    parts: list[bytes] = []
    total = 0
    rest = data
    while True:
        engine = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = engine.decompress(rest, _MAX_INFLATED - total + 1)
        except zlib.error as exc:
            raise ReadError("bad-gzip", f"gzip stream is damaged ({exc})") from None
        total += len(out)
        if engine.unconsumed_tail or total > _MAX_INFLATED:
            raise ReadError("too-large", "gzip stream inflates past the size limit")
        if not engine.eof:
            raise ReadError("truncated", "gzip stream ends early: the file is truncated")
        parts.append(out)
        rest = engine.unused_data
        if not rest.strip(b"\0"):
            return b"".join(parts)  # gzip.decompress ignores trailing zero padding
        if rest[:2] != b"\x1f\x8b":
            raise ReadError("bad-gzip", f"{len(rest)} bytes after the gzip stream")


class TorchGzipReader(FormatReader):
    name = "torch-gzip"

    def claims(self, head: bytes, src: Source) -> bool:
        return head[:2] == b"\x1f\x8b"

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        raw = src.exact(0, src.size)
        inner = BufferSource(inflate(raw))
        head = inner.read_at(0, 64)
        if is_zip(head) and torch_zip.looks_like_torch(directory_of(inner)):
            meta = torch_zip.describe(path, self.name, inner, directory_of(inner), deep=deep, loaders=(GUNZIP_LOAD,))
        else:
            meta = self._other(path, head, inner, deep)
        meta = replace(meta, size=src.size)
        if deep:
            meta = replace(meta, digest=_deep.digest(memoryview(raw)))
        return meta

    def _other(self, path: str, head: bytes, inner: BufferSource, deep: bool) -> FileMeta:
        """A legacy, tar-format or plain pickle inside: what ``torch.load`` makes of the bytes."""
        for reader in _INNER:
            if reader.claims(head, inner):
                try:
                    meta = reader.read(path, inner, deep=deep)
                except ReadError as exc:
                    if exc.problem == "resource-bomb":
                        raise
                    break
                if meta.foreign_globals:
                    return replace(meta, format=self.name, loaders=(GUNZIP_LOAD,))
                if reader.name == "torch-legacy":
                    return replace(meta, format=self.name)
                break
        raise ReadError("bad-gzip", "gzip file that does not wrap a torch.save archive")
