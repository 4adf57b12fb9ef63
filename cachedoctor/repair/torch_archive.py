"""torch.save's zip archive, read and written without torch (``torch_rewrite.py``).

:func:`records_of` takes an archive apart only where it is exactly what a loader would read
without doubt: one folder of stored (uncompressed) members, every name once (also ignoring
letter case, as torch's reader does), each local header naming its member, every CRC right,
no bytes before it. Anything else is ``None``: the caller leaves the file to torch.

:func:`write_archive` writes the bytes ``torch.save`` writes to a buffer (torch's
``PyTorchStreamWriter`` over miniz, as of torch 2.13 on Linux): the folder ``archive/``; each
record's data aligned to 64 bytes by an ``FB`` extra field padded with ``Z``; local headers
without sizes, each followed by a data descriptor; the ``version`` and
``.data/serialization_id`` records last; a ZIP64 end record before the classic one. The
serialization id is torch's: a hash of the record names, combined in the order a libstdc++
``std::unordered_set`` holds them (:func:`_set_order`), then the records' CRCs combined in
the order written. The tests hold it to torch.save's own bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

from cachedoctor.formats._deep_members import crc32  # the deep reads' CRC (ISA-L where installed)

ALIGNMENT = 64  # torch.serialization.config.save.storage_alignment
#: Records an archive may hold for the serialization id to be computed here: the hash-set
#: order is reproduced through the bucket counts a set of this size passes (checked to 300).
MAX_RECORDS = 262

_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # (written; read: its signature, name and extra length)
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_DESCRIPTOR = struct.Struct("<4sIII")
_END = struct.Struct("<4sHHHHIIH")
_END64 = struct.Struct("<4sQHHIIQQQQ")
_LOCATOR = struct.Struct("<4sIQI")
_FLAGS = 0x0808  # data descriptor, UTF-8 names
_U32 = 0xFFFFFFFF


def records_of(raw: bytes) -> tuple[str, dict[str, memoryview]] | None:
    """The archive's folder name and its records by name within it, or ``None``."""
    size = len(raw)
    if size < _END.size or raw[-_END.size : -_END.size + 4] != b"PK\x05\x06":
        return None  # (a comment after the end record: not torch's)
    count, cd_size, cd_offset = _END.unpack_from(raw, size - _END.size)[4:7]
    if count == 0xFFFF or cd_offset == _U32:  # ZIP64 numbers: read from the ZIP64 end record
        locator = size - _END.size - _LOCATOR.size
        if locator < 0 or raw[locator : locator + 4] != b"PK\x06\x07":
            return None
        end64 = _LOCATOR.unpack_from(raw, locator)[2]
        if end64 + _END64.size > locator or raw[end64 : end64 + 4] != b"PK\x06\x06":
            return None
        count, cd_size, cd_offset = _END64.unpack_from(raw, end64)[7:10]
    if count > MAX_RECORDS or cd_offset + cd_size > size:
        return None
    view = memoryview(raw)
    folder = ""
    records: dict[str, memoryview] = {}
    folded: set[str] = set()
    first, at = cd_offset, cd_offset
    for _ in range(count):
        if at + _CENTRAL.size > size:
            return None
        sig, _v, _n, flags, method, _t, _d, crc, csize, usize, nlen, xlen, clen, _k, _i, _e, offset = (
            _CENTRAL.unpack_from(raw, at)
        )
        name_bytes = raw[at + _CENTRAL.size : at + _CENTRAL.size + nlen]
        at += _CENTRAL.size + nlen + xlen + clen
        if sig != b"PK\x01\x02" or flags & 1 or method != 0 or csize != usize or _U32 in (csize, offset):
            return None  # encrypted, compressed, or ZIP64 member fields
        name = name_bytes.decode("ascii") if name_bytes.isascii() else ""
        top, _, inner = name.partition("/")
        lower = name.lower()
        if not inner or lower in folded or top != (folder or top):
            return None
        folder = top
        folded.add(lower)
        first = min(first, offset)
        head = offset + _LOCAL.size
        if head > cd_offset or raw[offset : offset + 4] != b"PK\x03\x04" or raw[head : head + nlen] != name_bytes:
            return None
        start = head + nlen + int.from_bytes(raw[offset + 28 : offset + 30], "little")
        if start + usize > cd_offset:
            return None
        record = view[start : start + usize]
        if crc32(record) != crc:
            return None
        records[inner] = record
    if at != cd_offset + cd_size or not folder or first != 0:
        return None
    return folder, records


def write_archive(records: Sequence[tuple[str, bytes | memoryview]]) -> bytes | None:
    """torch.save's archive of ``records`` (names within the folder, in the order torch writes
    them: ``data.pkl``, ``.format_version``, ``.storage_alignment``, ``byteorder``, the
    storages); ``version`` and ``.data/serialization_id`` are added here. ``None`` where it
    would need ZIP64 member fields (4 GB) or too many records for :func:`_set_order`."""
    records = [*records, ("version", b"3\n")]
    if len(records) + 1 > MAX_RECORDS:
        return None
    crcs = [crc32(data) for _name, data in records]
    records.append((".data/serialization_id", _serialization_id([n for n, _d in records], crcs).encode("ascii")))
    crcs.append(crc32(records[-1][1]))
    parts: list[bytes | memoryview] = []
    central: list[bytes] = []
    cursor = 0
    for (name, data), crc in zip(records, crcs, strict=True):
        full = f"archive/{name}".encode()
        start = cursor + _LOCAL.size + len(full) + 4
        pad = -start % ALIGNMENT
        size = len(data)
        if cursor >= _U32 or size >= _U32:
            return None
        header = _LOCAL.pack(b"PK\x03\x04", 0, _FLAGS, 0, 0, 0, 0, 0, 0, len(full), pad + 4)
        parts += [header, full, b"FB" + struct.pack("<H", pad) + b"Z" * pad, data]
        parts.append(_DESCRIPTOR.pack(b"PK\x07\x08", crc, size, size))
        central.append(
            _CENTRAL.pack(b"PK\x01\x02", 0, 0, _FLAGS, 0, 0, 0, crc, size, size, len(full), 0, 0, 0, 0, 0, cursor)
            + full
        )
        cursor = start + pad + size + _DESCRIPTOR.size
    cd_size = sum(len(c) for c in central)
    n = len(records)
    end64 = cursor + cd_size
    if end64 >= _U32:
        return None
    parts += central
    parts.append(_END64.pack(b"PK\x06\x06", _END64.size - 12, 0x031E, 0x2D, 0, 0, n, n, cd_size, cursor))
    parts.append(_LOCATOR.pack(b"PK\x06\x07", 0, end64, 1))
    parts.append(_END.pack(b"PK\x05\x06", 0, 0, n, n, cd_size, cursor, 0))
    return b"".join(parts)


_M64 = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995


def _string_hash(data: bytes) -> int:
    """libstdc++'s ``std::hash<std::string>`` (``_Hash_bytes``, MurmurHash64A, seed 0xc70f6907)."""
    n = len(data)
    h = (0xC70F6907 ^ (n * _MUL)) & _M64
    whole = n & ~7
    for i in range(0, whole, 8):
        k = (int.from_bytes(data[i : i + 8], "little") * _MUL) & _M64
        h = ((h ^ (((k ^ (k >> 47)) * _MUL) & _M64)) * _MUL) & _M64
    if n & 7:
        h = ((h ^ int.from_bytes(data[whole:], "little")) * _MUL) & _M64
    h = ((h ^ (h >> 47)) * _MUL) & _M64
    return h ^ (h >> 47)


def _combine(seed: int, value: int) -> int:
    """``c10::hash_combine``."""
    return (seed ^ ((value + 0x9E3779B9 + ((seed << 6) & _M64) + (seed >> 2)) & _M64)) & _M64


#: libstdc++'s bucket counts: ``_Prime_rehash_policy``'s small table, then its primes (the ones a
#: set of up to :data:`MAX_RECORDS` names reaches, and their neighbours).
_FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_PRIMES: tuple[int, ...] = (13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109)
_PRIMES += (113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409)
_PRIMES += (439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031)


def _set_order(names: list[str], codes: dict[str, int]) -> list[str]:
    """The order a libstdc++ ``std::unordered_set<std::string>`` iterates ``names`` inserted one
    by one: a node goes first in its bucket's run, or first in the list when its bucket is
    empty; a rehash (load factor 1, doubling to the next listed prime) re-links the list."""
    order: list[str] = []
    buckets, grow_at = 1, 0
    for name in names:
        if len(order) + 1 > grow_at:
            wanted = max(len(order) + 1, 0 if grow_at else 11)
            if wanted >= buckets:
                least = max(wanted + 1, buckets * 2)
                buckets = _FAST_BUCKETS[least] if least < len(_FAST_BUCKETS) else next(p for p in _PRIMES if p >= least)
                relinked: list[str] = []
                for node in order:
                    _insert(relinked, node, codes, buckets)
                order = relinked
            grow_at = buckets
        _insert(order, name, codes, buckets)
    return order


def _insert(order: list[str], name: str, codes: dict[str, int], buckets: int) -> None:
    bucket = codes[name] % buckets
    for i, other in enumerate(order):
        if codes[other] % buckets == bucket:
            order.insert(i, name)
            return
    order.insert(0, name)


@lru_cache(maxsize=64)
def _names_hash(names: tuple[str, ...]) -> int:
    """The first half of the serialization id (the same for every archive of the same names)."""
    codes = {name: _string_hash(name.encode()) for name in names}
    names_hash = 0
    for name in _set_order(list(names), codes):
        names_hash = _combine(names_hash, codes[name])
    return names_hash


def _serialization_id(names: list[str], crcs: list[int]) -> str:
    crc_hash = 0
    for crc in crcs:
        crc_hash = _combine(crc_hash, crc)
    return f"{_names_hash(tuple(names)):020d}{crc_hash:020d}"


__all__ = ["ALIGNMENT", "MAX_RECORDS", "records_of", "write_archive"]
