"""``np.savez`` archives (kohya's latent and text-encoder caches): a zip of ``.npy`` members.

Quick mode reads the central directory and each member's ``.npy`` header; deep mode CRC-checks
each member (a flipped byte otherwise surfaces only as ``Bad CRC-32`` when the member is read
to its end) and counts NaN/Inf. ``np.load`` reads any member whose bytes start with the
``.npy`` magic as an array, whatever its name, so a zip that is no torch archive is claimed
when every member is named ``.npy`` or any member holds an array; every entry is checked for
object arrays, duplicates included (zipfile keeps the last of two equal names).

Members are read as zipfile reads them: stored, deflate, BZIP2 or LZMA, at offsets shifted by
any bytes before the archive, each through a capped stream (:mod:`_inflate`), with ``.npy``
headers of any length numpy parses. A member declaring a decompression bomb's sizes is
reported before anything is inflated (:func:`check_bombs`).
"""

from __future__ import annotations

import struct

from cachedoctor.formats import _deep
from cachedoctor.formats._inflate import BOMB_BYTES, METHODS, STORED, CapPassed, MemberStream, bomb_reason
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._torch_pickles import looks_like_torch
from cachedoctor.formats._verdict import LOADERS, NP_LOAD, bomb
from cachedoctor.formats._zip import ZipDirectory, ZipMember, data_offset, directory_of, is_zip, member_stream
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta
from cachedoctor.formats.npy import (
    MAGIC,
    HeaderTooLarge,
    NpyHeader,
    header_end,
    object_globals,
    parse_header,
    tensor_from,
    unproven,
)

#: Members whose data is inflated in deep mode to count NaN/Inf (larger ones are CRC-checked in
#: pieces, their values not counted): the most the scanner holds of one member, under the
#: reader's memory cap (``scan/_memcap.FILE_MEMORY``, 192 MiB).
DEEP_CAP = 128 << 20
#: The smallest ``.npy`` that can hold an object array: magic, version, length, a minimal
#: header and a pickle; members shorter than this are never read to look for one.
_SMALLEST_NPY = 48
_HEAD_READ = 4096  # what one read takes of a stored member: the header of any real cache


def _is_npz(directory: ZipDirectory, src: Source) -> bool:
    if not directory.members:
        return False
    if all(name.endswith(".npy") for name in directory.members) or directory.concat:
        return True  # (an archive after other bytes: only zipfile reads it, which np.load uses)
    return not looks_like_torch(directory) and any(_starts_with_magic(src, m) for m in directory.entries[:256])


def _stream(src: Source, member: ZipMember, cap: int) -> MemberStream:
    return member_stream(src, member, cap)


def _starts_with_magic(src: Source, member: ZipMember) -> bool:
    """Whether ``np.load`` would read the member as an array (its bytes start with the magic)."""
    if member.size < 6 or member.method not in METHODS:
        return False
    if member.method == STORED:  # one read: the local header (torch pads its extra to 64 bytes) and the magic
        local = src.read_at(member.header_offset, 30 + len(member.name.encode()) + 96)
        try:
            start = data_offset(local, member) - member.header_offset
        except ReadError:
            return False
        first = local[start : start + 6] if start + 6 <= len(local) else src.read_at(member.header_offset + start, 6)
        return first == MAGIC
    try:
        return _stream(src, member, 64).read(6) == MAGIC
    except (ReadError, CapPassed):
        return False


def _member_header(src: Source, member: ZipMember) -> tuple[NpyHeader, MemberStream, bytes]:
    """The member's .npy header (of any length up to ``npy.MAX_HEADER``), the stream positioned
    after the bytes read, and those bytes (the header, then the start of the data)."""
    stream = _stream(src, member, member.size + 1)
    try:
        if member.method == STORED:  # the usual npz: one read holds the header (a longer one, two)
            first = src.read_at(stream.start, min(member.compressed_size, _HEAD_READ))
            end = header_end(first[:12], member.name)
            if end + _SMALL > len(first) and member.compressed_size > len(first):
                first = src.read_at(stream.start, min(member.compressed_size, end + _SMALL))
            stream.pos = stream.start + len(first)
            stream.produced = len(first)
        else:
            first = stream.read(12)
            end = header_end(first, member.name)
            first += stream.read(end - len(first) + _SMALL)
    except CapPassed:
        raise ReadError("bad-zip", f"member {member.name} inflates past its declared size") from None
    return parse_header(first, member.name), stream, first


def _object_data(stream: MemberStream, header: NpyHeader, first: bytes) -> bytes:
    """The pickle after an object array's header, read within the pickle limit; a member that
    stops inflating part way gives the bytes before the damage (the loader ran those)."""
    parts = [first[header.data_start :]]
    total = len(parts[0])
    try:
        while total <= LIMITS.pickle_bytes:
            piece = stream.read(64 << 10)
            if not piece:
                break
            parts.append(piece)
            total += len(piece)
    except (ReadError, CapPassed):
        pass
    return b"".join(parts)


def screen_arrays(
    src: Source, directory: ZipDirectory, known: ZipMember | None = None, known_data: bytes = b""
) -> list[str]:
    """What ``np.load`` would unpickle in this zip: every member whose bytes start with the
    ``.npy`` magic, whatever its name (``np.load`` reads a torch archive as an npz too), that
    is an object array (members shorter than any object array are not read; ``known``, whose
    bytes ``known_data`` the caller holds, is judged from them)."""
    found: list[str] = []
    for member in directory.entries:
        if member.size < _SMALLEST_NPY:
            continue
        if member is known and known_data[:6] != MAGIC:
            continue
        if member is not known and not _starts_with_magic(src, member):
            continue
        try:
            header, stream, first = _member_header(src, member)
        except HeaderTooLarge as exc:
            found.append(unproven(member.name, exc.message))
            continue
        except ReadError:
            continue
        if header.is_object:
            found += [g for g in object_globals(member.name, _object_data(stream, header, first)) if g not in found]
    return found


def with_arrays(meta: FileMeta, arrays: list[str]) -> FileMeta:
    """``meta`` with the object arrays ``np.load`` would unpickle added to its unsafe names."""
    if not arrays:
        return meta
    from dataclasses import replace

    unsafe = list(meta.foreign_globals) + [a for a in arrays if a not in meta.foreign_globals]
    loaders = meta.loaders + ((NP_LOAD,) if NP_LOAD not in meta.loaders else ())
    return replace(meta, foreign_globals=tuple(unsafe), loaders=loaders)


def check_bombs(directory: ZipDirectory, where: str) -> None:
    """A member, or all of them together, declaring a decompression bomb's sizes raises."""
    total = compressed = 0
    for member in directory.entries:
        if member.size > BOMB_BYTES:
            reason = bomb_reason(member.name, member.size, member.compressed_size)
            if reason is not None:
                raise bomb(member.name, reason)
        total += member.size
        compressed += member.compressed_size
    if total <= BOMB_BYTES:
        return
    reason = bomb_reason(f"{where}'s members together", total, compressed)
    if reason is not None:
        raise bomb(where, reason)


#: Arrays of at most this many bytes have their values read (they are in the block already read):
#: kohya's ``original_size`` and ``crop_ltrb``, which the dataset comparison checks.
_SMALL = 64
_CODES = {"int64": "q", "int32": "i", "int16": "h", "uint8": "B", "float64": "d", "float32": "f"}


def small_values(header: NpyHeader, first: bytes) -> tuple[float, ...] | None:
    code = _CODES.get(header.dtype)
    end = header.data_start + header.nbytes
    if code is None or header.fortran_order or header.nbytes > _SMALL or len(first) < end:
        return None
    return struct.unpack_from(f"<{header.nbytes // header.itemsize}{code}", first, header.data_start)


class NpzReader(FormatReader):
    name = "npz"

    def claims(self, head: bytes, src: Source) -> bool:
        return is_zip(head) and _is_npz(directory_of(src), src)

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        directory = directory_of(src)
        tensors: list[TensorMeta] = []
        foreign: list[str] = []
        crc_bad: tuple = ()
        digest = None
        values: list[tuple[str, tuple[float, ...]]] = []
        failed: ReadError | None = None
        check_bombs(directory, path)
        for member in directory.entries:
            name = member.name
            if not name.endswith(".npy") and not _starts_with_magic(src, member):
                continue  # np.load gives such a member back as raw bytes: nothing to unpickle
            try:
                header, stream, first = _member_header(src, member)
            except HeaderTooLarge as exc:  # numpy reads it with allow_pickle=True: cannot be shown safe
                foreign.append(unproven(name, exc.message + "; np.load(allow_pickle=True) reads any length"))
                continue
            except (ReadError, CapPassed) as exc:  # np.load reads members one by one: check the others still
                failed = failed or (exc if isinstance(exc, ReadError) else ReadError("bad-zip", str(exc)))
                continue
            if header.is_object:  # a pickle, not an array: unsafe-pickle says so; it has no tensor to check
                foreign += [g for g in object_globals(name, _object_data(stream, header, first)) if g not in foreign]
                continue
            if directory.members.get(name) != member:
                continue  # a duplicate name: zipfile reads the last one
            key = name[:-4] if name.endswith(".npy") else name
            small = small_values(header, first)
            if small is not None:
                values.append((key, small))
            data: memoryview | None = None
            if deep and isinstance(src, BufferSource) and member.size <= DEEP_CAP:
                if member.method == STORED:  # zero-copy: the file is in memory already
                    data = src.view(stream.start, member.compressed_size)[header.data_start :]
                else:
                    try:
                        data = memoryview(first[header.data_start :] + stream.read(member.size))
                    except (ReadError, CapPassed):
                        data = memoryview(b"")
            tensors.append(tensor_from(key, name, header, member.size - header.data_start, data))
        if failed is not None:
            if not foreign:
                raise failed
            return FileMeta(
                path,
                self.name,
                src.size,
                foreign_globals=tuple(foreign),
                loaders=LOADERS[self.name],
                unreadable_reason=failed.message,
            )
        if deep and isinstance(src, BufferSource):
            crc_bad = _deep.Members(src, directory).crc_bad
            digest = _deep.file_digest(src)
        return FileMeta(
            path,
            self.name,
            src.size,
            container="dict",
            tensors=tuple(tensors),
            foreign_globals=tuple(foreign),
            deep=deep,
            crc_mismatches=crc_bad,
            digest=digest,
            values=tuple(values),
            loaders=LOADERS[self.name] if foreign else (),
            ambiguous=directory.colliding(),
        )
