"""``np.savez`` archives (kohya's latent and text-encoder caches): a zip of ``.npy`` members.

Quick mode reads the central directory and each member's ``.npy`` header; deep mode CRC-checks
each member (a flipped byte otherwise surfaces only as ``Bad CRC-32`` when the member is read
to its end) and counts NaN/Inf. ``np.load`` reads any member whose bytes start with the
``.npy`` magic as an array, whatever its name, so a zip that is no torch archive is claimed
when every member is named ``.npy`` or any member holds an array; every entry is checked for
object arrays, duplicates included (zipfile keeps the last of two equal names).
"""

from __future__ import annotations

import struct
import zlib

from cachedoctor.formats import _deep
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._verdict import LOADERS
from cachedoctor.formats._zip import (
    DEFLATED,
    STORED,
    ZipDirectory,
    ZipMember,
    data_offset,
    decompress,
    directory_of,
    is_zip,
)
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta
from cachedoctor.formats.npy import MAGIC, NpyHeader, object_globals, parse_header, tensor_from, with_nonfinite

_HEADER_READ = 4096


def _is_npz(directory: ZipDirectory, src: Source) -> bool:
    if not directory.members:
        return False
    if all(name.endswith(".npy") for name in directory.members):
        return True
    from cachedoctor.formats.torch_zip import looks_like_torch

    return not looks_like_torch(directory) and any(_starts_with_magic(src, m) for m in directory.entries[:256])


def _starts_with_magic(src: Source, member: ZipMember) -> bool:
    try:
        local = src.read_at(member.header_offset, 30 + len(member.name.encode()) + 256)
        first = src.read_at(data_offset(local, member), min(member.compressed_size, 64))
        if member.method == DEFLATED:
            first = zlib.decompressobj(-15).decompress(first, 16)
    except (ReadError, zlib.error):
        return False
    return first[:6] == MAGIC


def _object_data(src: Source, member: ZipMember, header: NpyHeader, start: int) -> bytes:
    """The pickle after an object array's header, read within the pickle limit."""
    size = min(member.compressed_size, LIMITS.pickle_bytes)
    raw = src.read_at(start, size)
    if member.method == DEFLATED:
        try:
            raw = zlib.decompressobj(-15).decompress(raw, LIMITS.pickle_bytes + header.data_start)
        except zlib.error:
            return b""
    return raw[header.data_start :]


def _member_header(src: Source, member: ZipMember) -> tuple[NpyHeader, int, bytes]:
    """The member's .npy header, where its compressed bytes start, and its first bytes."""
    local = src.read_at(member.header_offset, 30 + len(member.name.encode()) + 256)
    start = data_offset(local, member)
    first = src.read_at(start, min(member.compressed_size, _HEADER_READ))
    if member.method == DEFLATED:
        try:
            first = zlib.decompressobj(-15).decompress(first, _HEADER_READ)
        except zlib.error as exc:
            raise ReadError("bad-zip", f"member {member.name} does not inflate: {exc}") from None
    elif member.method != STORED:
        raise ReadError("bad-zip", f"member {member.name} uses unsupported compression {member.method}")
    return parse_header(first, member.name), start, first


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
        for member in directory.entries:
            name = member.name
            if not name.endswith(".npy") and not _starts_with_magic(src, member):
                continue  # np.load gives such a member back as raw bytes: nothing to unpickle
            try:
                header, start, first = _member_header(src, member)
            except ReadError as exc:  # np.load reads members one by one: check the others still
                failed = failed or exc
                continue
            if header.is_object:  # a pickle, not an array: unsafe-pickle says so; it has no tensor to check
                foreign += [
                    g for g in object_globals(name, _object_data(src, member, header, start)) if g not in foreign
                ]
                continue
            if directory.members.get(name) != member:
                continue  # a duplicate name: zipfile reads the last one
            key = name[:-4] if name.endswith(".npy") else name
            small = small_values(header, first)
            if small is not None:
                values.append((key, small))
            tensor = tensor_from(key, name, header, member.size - header.data_start)
            if deep and isinstance(src, BufferSource):
                data = src.view(start, member.compressed_size)
                if member.method == DEFLATED:
                    try:
                        data = memoryview(decompress(data, member))
                    except ReadError:
                        data = memoryview(b"")
                tensor = with_nonfinite(tensor, header, data[header.data_start :])
            tensors.append(tensor)
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
            digest = _deep.digest(src.buffer)
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
