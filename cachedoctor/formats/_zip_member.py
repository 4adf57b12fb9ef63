"""One zip member's bytes: where its data starts (its local header), and its content read
through :mod:`_inflate` within a cap, so that no member, however it is compressed or whatever
size it declares, makes the scanner hold more than the caller allows.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from cachedoctor.formats._inflate import DEFLATED, STORED, CapPassed, MemberStream
from cachedoctor.formats._read_error import ReadError
from cachedoctor.formats._source import Source

if TYPE_CHECKING:
    from cachedoctor.formats._zip_directory import ZipMember

__all__ = [
    "DEFLATED",
    "STORED",
    "data_offset",
    "data_whatever_named",
    "decompress",
    "inflated_crc",
    "member_stream",
    "read_member",
]

_LOCAL = b"PK\x03\x04"


def data_offset(local_header: bytes | memoryview, member: ZipMember) -> int:
    """Where ``member``'s data starts, from the first bytes of its local header."""
    if local_header[:4] != _LOCAL or len(local_header) < 30:
        raise ReadError("bad-zip", f"local header of {member.name} is damaged")
    nlen, xlen = struct.unpack_from("<HH", local_header, 26)
    return member.header_offset + 30 + nlen + xlen


def local_name_differs(local_header: bytes | memoryview, member: ZipMember) -> bool:
    """Whether the local header names another file than the central directory does: miniz
    reads the data regardless, Python's zipfile refuses ("File name in directory ... differ")."""
    nlen = local_header[26] | local_header[27] << 8
    raw = bytes(local_header[30 : 30 + nlen])
    if len(raw) < nlen:
        return False  # not all of it in the bytes read; the caller reads more when it matters
    if raw.isascii() and raw.decode("ascii") == member.name:
        return False
    return member.name not in (raw.decode("utf-8", "replace"), raw.decode("cp437", "replace"))


def member_stream(src: Source, member: ZipMember, cap: int) -> MemberStream:
    """The member's uncompressed bytes on demand, at most ``cap`` of them."""
    head = src.read_at(member.header_offset, 30)
    start = data_offset(head, member)
    return MemberStream(src, start, member.method, member.compressed_size, member.name, cap)


def read_member(src: Source, member: ZipMember, *, limit: int) -> bytes:
    """Return ``member``'s uncompressed bytes (at most ``limit``), reading only that member."""
    if member.size > limit:
        raise ReadError("too-large", f"member {member.name} is {member.size} bytes, over the {limit}-byte limit")
    guess = 30 + len(member.name.encode()) + 128
    head = src.read_at(member.header_offset, guess + member.compressed_size)
    start = data_offset(head, member) - member.header_offset
    if local_name_differs(head, member):
        raise ReadError(
            "ambiguous-member",
            f"the local header of {member.name} names another file: torch.load and zipfile would read different data",
            members=[member.name],
        )
    raw = head[start : start + member.compressed_size]
    if len(raw) < member.compressed_size:
        raw = src.exact(member.header_offset + start, member.compressed_size)
    return decompress(raw, member)


def data_whatever_named(src: Source, member: ZipMember) -> bytes:
    """A member's bytes as miniz reads them: from the data its local header leads to, whatever
    name that header carries (zipfile refuses such a member)."""
    head = src.exact(member.header_offset, 30)
    start = data_offset(head, member)
    return decompress(src.exact(start, member.compressed_size), member)


def decompress(raw: bytes | memoryview, member: ZipMember) -> bytes:
    """The member's bytes from its compressed ``raw`` data: exactly its declared size, or a
    ``bad-zip`` error (inflating stops one byte past the declared size)."""
    if member.method == STORED:
        return bytes(raw)
    from cachedoctor.formats._source import BufferSource

    stream = MemberStream(BufferSource(raw), 0, member.method, len(raw), member.name, member.size + 1)
    try:
        out = stream.read(member.size + 1)
    except CapPassed:
        raise ReadError("bad-zip", f"member {member.name} inflates past its declared {member.size} bytes") from None
    if len(out) != member.size:
        raise ReadError("bad-zip", f"member {member.name} inflates to {len(out)} bytes, not {member.size}")
    return out


def inflated_crc(raw: bytes | memoryview, member: ZipMember) -> int:
    """CRC-32 of the member's uncompressed bytes, computed in bounded pieces (``-1`` when they do
    not inflate to the declared size): a member declaring gigabytes is never held whole."""
    from zlib import crc32

    from cachedoctor.formats._source import BufferSource

    if member.method == STORED:
        return crc32(raw)
    stream = MemberStream(BufferSource(raw), 0, member.method, len(raw), member.name, member.size)
    crc, total = 0, 0
    try:
        while True:
            piece = stream.read(1 << 20)
            if not piece:
                break
            crc, total = crc32(piece, crc), total + len(piece)
    except (ReadError, CapPassed):
        return -1
    return crc if total == member.size else -1
