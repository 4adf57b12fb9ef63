"""gzip-wrapped torch.save files (SimpleTuner ``--compress_disk_cache``, magic ``1f 8b``).

The whole file is inflated in memory (there is no index to seek in), streamed and capped at
:data:`MAX_INFLATED` (a gzip past it is a decompression bomb, judged without holding its output
when its trailer says so), then read as whatever is inside: SimpleTuner's reader gunzips and hands the bytes to ``torch.load``, so a legacy torch
file, a tar-format one or a plain pickle inside runs its payload as surely as a torch zip does,
and each is read by its own reader. gzip's own CRC-32 and length trailer are verified by the
inflate, so a flipped byte is caught even in quick mode.
"""

from __future__ import annotations

from dataclasses import replace

from cachedoctor.cachenames import claims_cache
from cachedoctor.formats import _deep, torch_zip
from cachedoctor.formats._inflate import CapPassed, gunzip
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._verdict import GUNZIP_LOAD, bomb
from cachedoctor.formats._zip import is_zip, torch_directory_of
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError
from cachedoctor.formats.plain_pickle import PlainPickleReader, named_before_break
from cachedoctor.formats.torch_legacy import TorchLegacyReader
from cachedoctor.formats.torch_tar import TorchTarReader

#: The most a gzip file is inflated to in memory (its inner file is then read like any other).
#: SimpleTuner's compressed caches are one latent or embedding each, megabytes at most; a gzip
#: that inflates past this is a decompression bomb (``gzip.decompress`` would hold all of it,
#: and the scanner cannot judge what lies past it): reading stops at the cap, which leaves room
#: under the reader's memory cap (``scan/_memcap.FILE_MEMORY``, 192 MiB) for the inner read.
MAX_INFLATED = 128 << 20
_INNER = (TorchLegacyReader(), TorchTarReader(), PlainPickleReader())


def inflate(data: bytes | memoryview) -> bytearray:
    """gunzip ``data`` as ``gzip.decompress`` reads it (every member, trailers verified),
    holding at most :data:`MAX_INFLATED` bytes and stopping there. When the trailer declares
    more than that (ISIZE, the size modulo 2**32), the stream is first only counted, so that an
    honest bomb is judged without holding any of its output."""
    try:
        if len(data) >= 4 and int.from_bytes(bytes(data[-4:]), "little") > MAX_INFLATED:
            gunzip(data, MAX_INFLATED, keep=False)
        return gunzip(data, MAX_INFLATED)
    except CapPassed as exc:
        raise bomb(
            "the gzip stream",
            f"inflates past {exc.cap:,} bytes from {len(data):,} (over {exc.produced // max(len(data), 1):,}:1); "
            "reading stopped there",
        ) from None


class TorchGzipReader(FormatReader):
    name = "torch-gzip"

    def claims(self, head: bytes, src: Source) -> bool:
        return head[:2] == b"\x1f\x8b"

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        raw = src.buffer if isinstance(src, BufferSource) else src.exact(0, src.size)
        inner = BufferSource(memoryview(inflate(raw)), digest=False)  # the digest is the file's
        head = inner.read_at(0, 64)
        directory = torch_directory_of(inner) if is_zip(head) else None
        if directory is not None and torch_zip.looks_like_torch(directory):
            meta = torch_zip.describe(path, self.name, inner, directory, deep=deep, loaders=(GUNZIP_LOAD,))
        else:
            meta = self._other(path, head, inner, deep)
        meta = replace(meta, size=src.size)
        if deep and isinstance(src, BufferSource):  # (a deep read's source is always the whole file)
            meta = replace(meta, digest=_deep.file_digest(src))
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
        reached = named_before_break(path, inner) if claims_cache(path) else None  # breaks after naming a module
        if reached is not None:
            return replace(reached, format=self.name, loaders=(GUNZIP_LOAD,))
        raise ReadError("bad-gzip", "gzip file that does not wrap a torch.save archive")
