"""A small zip central-directory reader for torch.save and np.savez archives, exactly as
tolerant as the loaders' own readers (see :func:`read_directory`).

Why not ``zipfile``: it is several times slower per archive than two ``pread`` calls and a
``struct`` parse, and a quick scan opens millions of archives. This reader only lists members
(name, method, CRC, sizes, header offset); :mod:`_zip_member` finds where a member's data
starts and reads it within caps. Every inconsistency is a :class:`ReadError`, never another
exception.

Two readers look members up differently, and a hostile archive can exploit the difference:
torch's reader (miniz) matches names case-insensitively through a heap-sorted index and a
binary search, while Python's ``zipfile`` (``np.load``) matches exactly and keeps the last of
two equal names. :attr:`ZipDirectory.members` follows ``zipfile``; :meth:`ZipDirectory.torch_index`
follows miniz step for step; every entry is kept in :attr:`ZipDirectory.entries`, and names
that collide under either rule are listed by :meth:`ZipDirectory.colliding`.
"""

from __future__ import annotations

import struct

from cachedoctor.formats._read_error import ReadError
from cachedoctor.formats._source import Source

# ``X as X``: moved to _zip_directory.py (below _source.py, which keeps a parsed one), still
# importable from here
from cachedoctor.formats._zip_directory import ZipDirectory as ZipDirectory
from cachedoctor.formats._zip_directory import ZipMember as ZipMember
from cachedoctor.formats._zip_directory import fold as fold
from cachedoctor.formats._zip_member import (  # noqa: F401 (re-exported: the readers' one import)
    DEFLATED,
    STORED,
    data_offset,
    decompress,
    inflated_crc,
    local_name_differs,
    member_stream,
    read_member,
)

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_TAIL_GUESS = 8192
_MAX_COMMENT = 0xFFFF
_MAX_MEMBERS = 1_000_000


# The central directory entry's fields a reader uses (signature, flags, method, CRC, sizes, name,
# extra and comment lengths, header offset); versions, times, disk and attributes are skipped.
_CENTRAL_ENTRY = struct.Struct("<4s4xHH4xIIIHHH8xI")
_END_RECORD = struct.Struct("<4sHHHHIIH")


def directory_of(src: Source) -> ZipDirectory:
    """The central directory of ``src``, parsed once per source (sniffing and reading share it)."""
    cached: ZipDirectory | None = getattr(src, "_zip_directory", None)
    if cached is None:
        cached = read_directory(src)
        src._zip_directory = cached
    return cached


def torch_directory_of(src: Source) -> ZipDirectory | None:
    """The central directory as torch.load's reader (miniz) sees it: :func:`directory_of`'s
    when zipfile adds nothing back, else read again with the offsets as written (``None`` when
    miniz could not read it either). Bytes between the central directory and the end record
    shift zipfile's offsets but not miniz's: such an archive loads in torch.load only."""
    try:
        directory = directory_of(src)
    except ReadError:
        directory = None
    if directory is not None and directory.concat == 0:
        return directory
    cached: ZipDirectory | bool | None = getattr(src, "_torch_directory", False)
    if cached is False:
        try:
            cached = read_directory(src, absolute=True)
        except ReadError:
            cached = None
        src._torch_directory = cached
    assert cached is not True
    return cached


def is_zip(head: bytes) -> bool:
    return head[:4] in (_LOCAL, _EOCD)


def read_directory(src: Source, *, absolute: bool = False) -> ZipDirectory:
    """Parse the end records and the central directory of the zip archive in ``src``, with the
    tolerances the real readers have (measured with torch 2.13 and Python 3.11, see
    docs/safety.md): bytes after the end record and a comment length that runs past the end
    of the file are ignored (zipfile and miniz both find the last end-record signature); the
    end record's disk numbers are ignored (zipfile never reads them; miniz reads a ZIP64
    archive's from its ZIP64 record); and bytes prepended to the archive shift every offset by
    the same amount, which zipfile (and so ``np.load``) adds back (``concat``) and miniz does
    not. ``absolute`` reads the offsets as miniz does (no adjustment; members may lie anywhere
    in the file, even after the central directory): torch.load's view when the two differ."""
    size = src.size
    if size < 22:
        raise ReadError("truncated", "too short to be a zip archive (no end record)")
    tail_len = min(size, _TAIL_GUESS)
    tail_start = size - tail_len
    tail = src.exact(tail_start, tail_len)
    eocd = tail_len - 22 if tail[-22:-18] == _EOCD else tail.rfind(_EOCD, 0, tail_len - 18)
    if eocd < 0 and tail_start > 0:
        tail_len = min(size, _TAIL_GUESS + _MAX_COMMENT + 22)
        tail_start = size - tail_len
        tail = src.exact(tail_start, tail_len)
        eocd = tail.rfind(_EOCD, 0, tail_len - 18)
    if eocd < 0:
        raise ReadError("truncated", "no zip end record: the archive is truncated (failed finding central directory)")
    (_, _, _, _, n_total, cd_size, cd_offset, _) = _END_RECORD.unpack_from(tail, eocd)
    eocd_pos = tail_start + eocd
    end_of_cd = eocd_pos
    loc = eocd - 20
    if loc >= 0 and tail[loc : loc + 4] == _EOCD64_LOCATOR:
        (_, _, eocd64_pos, _) = struct.unpack_from("<4sIQI", tail, loc)
        if eocd64_pos + 56 > tail_start + loc:
            raise ReadError("bad-zip", "ZIP64 end record points past its locator")
        rec = _slice(src, tail, tail_start, eocd64_pos, 56)
        if rec[:4] != _EOCD64:
            rec = _slice(src, tail, tail_start, eocd_pos - 76, 56)  # where zipfile looks: just before the locator
            eocd64_pos = eocd_pos - 76
        if rec[:4] != _EOCD64:
            raise ReadError("bad-zip", "ZIP64 end record signature missing")
        (_, _, _, _, _, _, _, n_total, cd_size, cd_offset) = struct.unpack_from("<4sQHHIIQQQQ", rec)
        end_of_cd = eocd64_pos
    elif 0xFFFFFFFF in (cd_size, cd_offset) or (n_total == 0xFFFF and absolute):  # zipfile never reads the count
        raise ReadError("bad-zip", "end record needs a ZIP64 record that is missing")
    if n_total > _MAX_MEMBERS:
        raise ReadError("bad-zip", f"implausible member count {n_total}")
    concat = 0 if absolute else end_of_cd - cd_size - cd_offset  # bytes before the archive: zipfile's "concat"
    if concat < 0 or cd_offset + cd_size > end_of_cd:
        raise ReadError("truncated", "central directory runs past the end record")
    cd_offset += concat
    cd = _slice(src, tail, tail_start, cd_offset, cd_size)
    # miniz reads as many entries as the end record counts; zipfile never reads the count but
    # reads entries until the directory's stated size is used up: each view parsed as its reader does
    entries = _parse_central(cd, n_total if absolute else None, size if absolute else cd_offset, concat)
    return ZipDirectory(members={e.name: e for e in entries}, cd_offset=cd_offset, entries=entries, concat=concat)


def _slice(src: Source, tail: bytes, tail_start: int, offset: int, length: int) -> bytes:
    if offset >= tail_start:
        start = offset - tail_start
        return tail[start : start + length]
    return src.exact(offset, length)


def _parse_central(cd: bytes, count: int | None, data_end: int, concat: int) -> tuple[ZipMember, ...]:
    """Every central directory entry, each member's data ending by ``data_end``; the hot loop
    of a quick scan, so kept lean. ``count`` entries as miniz reads them, each within the
    directory; ``None`` reads as zipfile does: entries until the directory's size is used up,
    the last one's name, extra field and comment allowed to run past it (zipfile reads them
    short from its copy of the directory and goes on)."""
    by_size = count is None
    members: list[ZipMember] = []
    append = members.append
    unpack, new, end, pos = _CENTRAL_ENTRY.unpack_from, tuple.__new__, len(cd), 0
    try:
        for _ in range(_MAX_MEMBERS if count is None else count):
            if by_size and pos >= end:
                break
            (sig, flags, method, crc, csize, usize, nlen, xlen, clen, hoff) = unpack(cd, pos)
            if sig != _CENTRAL:
                raise ReadError("bad-zip", f"central directory entry {len(members)} is damaged")
            name_end = pos + 46 + nlen
            raw_name = cd[pos + 46 : name_end]
            pos = name_end + xlen + clen
            if pos > end and not by_size:
                raise ReadError("bad-zip", "central directory is cut short")
            if usize == 0xFFFFFFFF or csize == 0xFFFFFFFF or hoff == 0xFFFFFFFF:
                usize, csize, hoff = _zip64_extra(cd[name_end : name_end + xlen], usize, csize, hoff)
            hoff += concat
            name = raw_name.decode("utf-8" if flags & 0x800 or raw_name.isascii() else "cp437", "replace")
            if hoff + 30 + nlen + csize > data_end:
                raise ReadError("truncated", f"member {name} runs past the central directory")
            append(new(ZipMember, (name, method, crc, csize, usize, hoff)))
    except struct.error:
        raise ReadError("bad-zip", "central directory is cut short") from None
    return tuple(members)


def _zip64_extra(extra: bytes, usize: int, csize: int, hoff: int) -> tuple[int, int, int]:
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4 : pos + 4 + length]
        pos += 4 + length
        if tag != 1:
            continue
        fields = [v for v in (usize, csize, hoff)]
        at = 0
        for i, value in enumerate(fields):
            if value == 0xFFFFFFFF:
                if at + 8 > len(body):
                    raise ReadError("bad-zip", "ZIP64 extra field is short")
                fields[i] = struct.unpack_from("<Q", body, at)[0]
                at += 8
        return fields[0], fields[1], fields[2]
    raise ReadError("bad-zip", "member needs a ZIP64 extra field that is missing")
