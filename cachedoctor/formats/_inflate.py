"""Streamed decompression with caps that stop reading: zip members (stored, deflate, BZIP2,
LZMA) and gzip files.

Why streamed: a 2 MB file can inflate to gigabytes (a decompression bomb). Every reader here
produces output in bounded pieces and stops as soon as a cap is passed, so the scanner never
holds more than the cap, and never spends longer than inflating the cap takes. The caps say
what the caller will accept; what passing one means (a bomb, or a file too large to judge)
is the caller's decision, made from declared sizes (a zip member's, an ``.npy`` header's).

``np.load`` reads npz members through :mod:`zipfile`, which inflates deflate, BZIP2 and LZMA
(methods 8, 12, 14); torch's reader (miniz) only stored and deflate. All four are read here.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Protocol

from cachedoctor.formats._read_error import ReadError
from cachedoctor.formats._source import Source

STORED, DEFLATED, BZIP2, LZMA = 0, 8, 12, 14
METHODS = frozenset({STORED, DEFLATED, BZIP2, LZMA})
_CHUNK = 256 * 1024  # compressed bytes taken from the file per step


class CapPassed(Exception):
    """More output than the cap the caller set: reading stopped there."""

    def __init__(self, produced: int, cap: int) -> None:
        super().__init__(f"inflates past {cap:,} bytes")
        self.produced = produced
        self.cap = cap


class _Engine(Protocol):
    eof: bool

    def feed(self, data: bytes, max_out: int) -> bytes: ...

    def hungry(self) -> bool: ...


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self.obj = zlib.decompressobj(wbits)
        self.tail = b""
        self.eof = False
        self.full = False  # the last call filled max_out: zlib may hold more output with no input left

    def feed(self, data: bytes, max_out: int) -> bytes:
        out = self.obj.decompress(self.tail + data if self.tail else data, max_out)
        self.tail = self.obj.unconsumed_tail
        self.eof = self.obj.eof
        self.full = len(out) == max_out
        return out

    def hungry(self) -> bool:
        return not self.tail and not self.full


class _Buffered:
    """bz2 and lzma decompressors keep their own unconsumed input."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.eof = False

    def feed(self, data: bytes, max_out: int) -> bytes:
        out = self.obj.decompress(data, max_out)
        self.eof = self.obj.eof
        return out

    def hungry(self) -> bool:
        return self.obj.needs_input


#: What a decompressor raises on damaged input (lzma's error is added when lzma is first used:
#: bz2 and lzma are imported only for the members that need them).
_ERRORS: tuple[type[Exception], ...] = (zlib.error, OSError, EOFError, ValueError)


class MemberStream:
    """The uncompressed bytes of one zip member whose compressed data starts at ``start``,
    produced on demand; at most ``cap`` bytes in all (:class:`CapPassed` past it)."""

    def __init__(self, src: Source, start: int, method: int, compressed_size: int, name: str, cap: int) -> None:
        if method not in METHODS:
            raise ReadError("bad-zip", f"member {name} uses compression method {method}, which no loader reads")
        self.src, self.name, self.cap, self.method = src, name, cap, method
        self.start, self.pos, self.end = start, start, start + compressed_size
        self.produced = 0
        self.chunk = 4096  # grows to _CHUNK: a header read takes one small read
        self.engine: _Engine | None = None
        if method == DEFLATED:
            self.engine = _Zlib(-15)
        elif method == BZIP2:
            import bz2

            self.engine = _Buffered(bz2.BZ2Decompressor())
        elif method == LZMA:
            self.engine = self._lzma()

    def _lzma(self) -> _Engine:
        """zip's LZMA: a 4-byte header (version, properties size), the properties, then a raw
        LZMA1 stream, as zipfile's ``LZMADecompressor`` reads it."""
        head = self._take(4)
        if len(head) < 4:
            raise ReadError("truncated", f"member {self.name}: LZMA header cut short")
        (psize,) = struct.unpack_from("<H", head, 2)
        props = self._take(psize)
        global _ERRORS
        import lzma

        _ERRORS = (*_ERRORS, lzma.LZMAError) if lzma.LZMAError not in _ERRORS else _ERRORS
        try:
            fil = lzma._decode_filter_properties(lzma.FILTER_LZMA1, props)  # type: ignore[attr-defined]
            return _Buffered(lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[fil]))
        except _ERRORS as exc:
            raise ReadError("bad-zip", f"member {self.name}: bad LZMA properties ({exc})") from None

    def _take(self, n: int) -> bytes:
        data = self.src.read_at(self.pos, max(0, min(n, self.end - self.pos)))
        self.pos += len(data)
        return data

    @property
    def eof(self) -> bool:
        if self.engine is None:
            return self.pos >= self.end
        return self.engine.eof or (self.pos >= self.end and self.engine.hungry())

    def read(self, n: int) -> bytes:
        """Up to ``n`` more bytes (fewer only at the end of the member's data)."""
        out = bytearray()
        while len(out) < n and not self.eof:
            want = n - len(out)
            if self.engine is None:
                piece = self._take(min(want, _CHUNK * 4))
                if not piece:
                    break
            else:
                data = b""
                if self.engine.hungry():
                    data = self._take(self.chunk)
                    self.chunk = min(self.chunk * 2, _CHUNK)
                try:
                    piece = self.engine.feed(data, min(want, _CHUNK * 4))
                except _ERRORS as exc:
                    raise ReadError("bad-zip", f"member {self.name} does not inflate: {exc}") from None
                if not piece and not data and self.engine.hungry():
                    break
            self.produced += len(piece)
            if self.produced > self.cap:
                raise CapPassed(self.produced, self.cap)
            out += piece
        return bytes(out)

    def skip(self, n: int) -> int:
        """Read and drop up to ``n`` bytes in bounded pieces; how many there were."""
        done = 0
        while done < n:
            piece = self.read(min(n - done, _CHUNK * 4))
            if not piece:
                break
            done += len(piece)
        return done


def gunzip(data: bytes | memoryview, cap: int, *, keep: bool = True) -> bytearray:
    """gunzip ``data`` as ``gzip.decompress`` does (every member, trailing zero padding ignored),
    each member's CRC and length checked; :class:`CapPassed` as soon as the output passes
    ``cap``, having held at most ``cap`` bytes (none with ``keep=False``: only counted)."""
    out = bytearray()
    counted = 0
    rest = memoryview(data)
    while True:
        engine = zlib.decompressobj(16 + zlib.MAX_WBITS)
        at = 0
        while not engine.eof:
            if engine.unconsumed_tail:
                chunk = engine.unconsumed_tail
            else:
                chunk = bytes(rest[at : at + _CHUNK])
                at += len(chunk)
                if not chunk:
                    raise ReadError("truncated", "gzip stream ends early: the file is truncated")
            try:
                piece = engine.decompress(chunk, min(_CHUNK * 4, cap - counted + 1))
            except zlib.error as exc:
                raise ReadError("bad-gzip", f"gzip stream is damaged ({exc})") from None
            counted += len(piece)
            if keep:
                out += piece
            if counted > cap:
                raise CapPassed(counted, cap)
        rest = memoryview(engine.unused_data + bytes(rest[at:]))
        if not bytes(rest).strip(b"\0"):  # gzip.decompress ignores trailing zero padding
            return out  # not copied: a copy would hold the output twice
        if bytes(rest[:2]) != b"\x1f\x8b":
            raise ReadError("bad-gzip", f"{len(rest)} bytes after the gzip stream")


#: A member (or an archive's members together) declaring more than this many uncompressed
#: bytes, at more than :data:`BOMB_RATIO` times its compressed size, is a decompression bomb:
#: every loader allocates the declared size (miniz, and numpy for an array's data) or inflates
#: it (zipfile). Real caches stay far below: a latent is kilobytes to tens of megabytes, and a
#: ``savez_compressed`` of an all-zero latent, whose ratio is huge, is small in absolute terms.
BOMB_BYTES = 512 << 20
BOMB_RATIO = 100


def bomb_reason(name: str, size: int, compressed: int) -> str | None:
    """Why ``size`` declared bytes from ``compressed`` ones are a decompression bomb, or ``None``."""
    if size > BOMB_BYTES and size > BOMB_RATIO * max(compressed, 1):
        return (
            f"{name} inflates to {size:,} bytes from {compressed:,} ({size // max(compressed, 1):,}:1), "
            f"limits {BOMB_BYTES:,} bytes at {BOMB_RATIO}:1"
        )
    return None
