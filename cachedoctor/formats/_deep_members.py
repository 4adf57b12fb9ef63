"""Deep mode's pass over a zip archive's members: each one's local header and CRC-32.

Why a module of its own: the files of a cache share their layout (the same members at the same
offsets, only the CRCs differ), and the walk member by member is most of a small file's deep
read in Python. So the first file of a layout is walked in full (:class:`Members`), and what
it taught is kept as a :class:`_Layout`: every local header the next file of that layout must
hold, checked in one ``struct`` call and one comparison, and each member's data as a slice,
CRC-checked in one ``map``. A file whose headers or CRCs differ in any way is walked in full
again, so the findings are the full walk's, byte for byte; only the time differs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

try:  # ISA-L's CRC-32 is the same polynomial as zlib's, about six times faster (SIMD)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal has wheels for the common platforms
    from zlib import crc32

from cachedoctor.formats._source import BufferSource
from cachedoctor.formats._zip import STORED, ZipDirectory, inflated_crc, local_name_differs
from cachedoctor.formats.interface import MemberCrc, ReadError


class Members:
    """What a deep read learns from the members' own bytes, in one pass over them: where each
    one's data starts (its local header), which local headers carry another name than the
    central directory (miniz reads those anyway, zipfile refuses), and which members fail the
    CRC-32 the central directory records (torch.load never checks it)."""

    __slots__ = ("crc_bad", "renamed", "starts")
    starts: dict[str, int]
    renamed: list[str]
    crc_bad: tuple[MemberCrc, ...]

    def __init__(self, src: BufferSource, directory: ZipDirectory) -> None:
        entries = directory.entries
        if len(entries) > _MAX_MEMBERS:  # no layout is kept for such an archive: no key is built either
            self._walk(src, directory, None)
            return
        # where its central directory lies, with how many entries, in a file of this size: with
        # its bytes from there to the end (times and CRCs aside) compared by the layout, that is
        # the whole directory as either reader parses it (see _Layout)
        key = (src.size, directory.cd_offset, directory.concat, len(entries))
        known = _layouts.get(key)
        if known is not None and known.holds(src.buffer):
            self.starts, self.renamed, self.crc_bad = known.starts, [], ()
            return
        heads: list[tuple[int, int, int, bytes]] = []
        self._walk(src, directory, heads)
        if (known is None or not self.crc_bad) and not self.renamed and len(directory.members) == len(entries):
            layout = _Layout.of(heads, src, directory, self.starts)
            if layout is not None:
                if len(_layouts) >= _LAYOUTS:
                    _layouts.clear()  # a cache has a handful; a hostile set of archives any number
                _layouts[key] = layout

    def _walk(
        self, src: BufferSource, directory: ZipDirectory, heads: list[tuple[int, int, int, bytes]] | None
    ) -> None:
        """Every member in turn; ``heads`` (unless ``None``) gets each stored member's local
        header (offset, name length, extra length, name) for :meth:`_Layout.of`."""
        starts = self.starts = {}
        self.renamed = []
        crc_bad: list[MemberCrc] = []
        buffer, size = src.buffer, src.size
        winners, unpack, named = directory.members, _LOCAL_HEAD.unpack_from, _named_head
        for member in directory.entries:
            name, method, crc, compressed, _, at = member
            expected, length, unpack_named = named(name)
            if unpack_named is not None and at + 30 + length <= size:  # the header and its name, one unpack
                signature, nlen, xlen, local = unpack_named(buffer, at)
                same = nlen == length and local == expected
            elif at + 30 > size:
                raise ReadError("truncated", f"file ends before byte {at + 30}")
            else:
                signature, nlen, xlen = unpack(buffer, at)
                same = buffer[at + 30 : at + 30 + nlen].tobytes() == expected
            if not same and local_name_differs(buffer[at : min(size, at + 30 + nlen)].tobytes(), member):
                self.renamed.append(name)
            if winners[name] is not member:
                continue  # zipfile reads the last entry of a name; torch.load's pick is judged elsewhere
            if signature != b"PK\x03\x04":
                raise ReadError("bad-zip", f"local header of {name} is damaged")
            start = starts[name] = at + 30 + nlen + xlen
            end = start + compressed
            if end > size:
                raise ReadError("truncated", f"file ends before byte {end}")
            data = buffer[start:end]
            if method == STORED:
                actual = crc32(data)
                if same and heads is not None:
                    heads.append((at, nlen, xlen, expected))
            else:
                actual = inflated_crc(data, member)  # streamed: bounded
            if actual != crc:
                crc_bad.append(MemberCrc(name, crc, actual))
        self.crc_bad = tuple(crc_bad)


class _Layout(NamedTuple):
    """The local headers, central directory and data spans of one archive layout, learned from a
    file walked in full whose members were all stored, uniquely named and named alike in both
    headers, and whose central directory runs to a plain end record at the end of the file.

    Its key (:class:`Members`) is the file's size, where the directory starts, zipfile's
    ``concat`` and the number of entries; a file of that key holds the layout when its bytes from
    the directory to the end are the taught file's, times, dates and CRCs aside. Both readers
    parse the directory from those bytes alone (the end record is found at the same place, it
    names the same directory, the entries are read one after another from it), so the entries are
    the taught file's but for their CRCs, which :meth:`holds` reads from the same bytes."""

    unpack: Callable[[memoryview], tuple[object, ...]]  # the local headers, then the directory
    expected: tuple[object, ...]  # what it gives back for this layout
    crcs: Callable[[memoryview], tuple[int, ...]]  # the directory's CRCs, in entry order
    spans: tuple[slice, ...]  # each entry's data, in central-directory order
    starts: dict[str, int]  # each member's data start (shared: readers only look it up)

    @classmethod
    def of(
        cls,
        heads: list[tuple[int, int, int, bytes]],
        src: BufferSource,
        directory: ZipDirectory,
        starts: dict[str, int],
    ) -> _Layout | None:
        entries, buffer, size = directory.entries, src.buffer, src.size
        if len(heads) != len(entries):
            return None  # a member compressed, or named otherwise locally: the full walk every time
        fmt, crc_fmt, pos = ["<"], ["<"], 0
        for at, nlen, _, _ in sorted(heads):
            if at < pos:
                return None  # overlapping headers (hostile): no single struct reads them
            fmt.append(f"{at - pos}x4s22xHH{nlen}s")
            pos = at + 30 + nlen
        at = directory.cd_offset
        if at < pos:
            return None
        fmt.append(f"{at - pos}x")
        crc_fmt.append(f"{at}x")
        for entry in entries:  # each central header: 46 bytes, then name, extra field, comment
            if at + 46 > size or buffer[at : at + 4] != b"PK\x01\x02":
                return None
            (crc,) = _U32.unpack_from(buffer, at + 16)
            nlen, xlen, clen = _LENGTHS.unpack_from(buffer, at + 28)
            rest = 26 + nlen + xlen + clen  # from the compressed size on
            if crc != entry.crc:
                return None
            fmt.append(f"12s8x{rest}s")  # the times, dates and CRC aside
            crc_fmt.append(f"16xI{rest}x")
            at += 20 + rest
        if not _plain_end(buffer, at, size):
            return None
        fmt.append(f"{size - at}s")
        unpack = struct.Struct("".join(fmt)).unpack_from
        spans = tuple(slice(starts[e.name], starts[e.name] + e.compressed_size) for e in entries)
        return cls(unpack, unpack(buffer), struct.Struct("".join(crc_fmt)).unpack_from, spans, starts)

    def holds(self, buffer: memoryview) -> bool:
        """Whether the file's local headers and directory are this layout's and every CRC matches."""
        if self.unpack(buffer) != self.expected:
            return False
        return tuple(map(crc32, map(buffer.__getitem__, self.spans))) == self.crcs(buffer)


def _plain_end(buffer: memoryview, at: int, size: int) -> bool:
    """Whether the directory that ends at ``at`` is followed by the end record and nothing else,
    or (as torch.save writes) by a ZIP64 end record, its locator pointing at it, and the end
    record: then every byte a reader parses the directory from lies in ``[directory, end)``.
    A comment, bytes after the end record or a locator pointing elsewhere: no layout is kept."""
    if at + 22 == size:
        return buffer[at : at + 4] == _EOCD and buffer[at - 20 : at - 16] != _LOCATOR
    return (
        at + 98 == size
        and buffer[at : at + 4] == b"PK\x06\x06"
        and buffer[at + 56 : at + 60] == _LOCATOR
        and _U64.unpack_from(buffer, at + 64)[0] == at
        and buffer[at + 76 : at + 80] == _EOCD
    )


_EOCD = b"PK\x05\x06"
_LOCATOR = b"PK\x06\x07"
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_LENGTHS = struct.Struct("<HHH")
_layouts: dict[tuple, _Layout] = {}
_LAYOUTS = 256
#: an archive with more members is walked in full every time (a layout's struct and its key stay
#: small; a hostile archive of a million members costs no million-tuple key)
_MAX_MEMBERS = 64
_LOCAL_HEAD = struct.Struct("<4s22xHH")
_Unpack = Callable[[memoryview, int], tuple[bytes, int, int, bytes]]
_NAMED_UP_TO = 255  # longest name with an unpacker of its own


@lru_cache(maxsize=4096)  # the members of a cache share a handful of names; a hostile archive any number
def _named_head(name: str) -> tuple[bytes, int, _Unpack | None]:
    """``name``'s bytes, their length, and an unpacker of a local header with the name after it
    (``None`` for long names, which are sliced)."""
    expected = name.encode()
    length = len(expected)
    unpack = struct.Struct(f"<4s22xHH{length}s").unpack_from if length <= _NAMED_UP_TO else None
    return expected, length, unpack
