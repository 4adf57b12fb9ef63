"""``np.savez`` archives (kohya's latent and text-encoder caches): a zip of ``.npy`` members.

Quick mode reads the central directory and each member's ``.npy`` header; deep mode CRC-checks
each member (a flipped byte otherwise surfaces only as ``Bad CRC-32`` when the member is read
to its end) and counts NaN/Inf.
"""

from __future__ import annotations

import struct
import zlib

from cachedoctor.formats import _deep
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._zip import DEFLATED, STORED, ZipDirectory, ZipMember, data_offset, decompress, directory_of, is_zip
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta
from cachedoctor.formats.npy import NpyHeader, parse_header, tensor_from, with_nonfinite

_HEADER_READ = 4096


def _is_npz(directory: ZipDirectory) -> bool:
    return bool(directory.members) and all(name.endswith(".npy") for name in directory.members)


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
        return is_zip(head) and _is_npz(directory_of(src))

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        directory = directory_of(src)
        tensors: list[TensorMeta] = []
        foreign: list[str] = []
        crc_bad: tuple = ()
        digest = None
        values: list[tuple[str, tuple[float, ...]]] = []
        for name, member in directory.members.items():
            header, start, first = _member_header(src, member)
            small = small_values(header, first)
            if small is not None:
                values.append((name[:-4], small))
            tensor = tensor_from(name[:-4], name, header, member.size - header.data_start)
            if header.is_object:
                foreign.append(f"{name}: numpy object array (pickled)")
            if deep and isinstance(src, BufferSource):
                data = src.view(start, member.compressed_size)
                if member.method == DEFLATED:
                    try:
                        data = memoryview(decompress(data, member))
                    except ReadError:
                        data = memoryview(b"")
                tensor = with_nonfinite(tensor, header, data[header.data_start:])
            tensors.append(tensor)
        if deep and isinstance(src, BufferSource):
            crc_bad = _deep.crc_mismatches(src, directory, _deep.member_starts(src, directory))
            digest = _deep.digest(src.buffer)
        return FileMeta(path, self.name, src.size, container="dict", tensors=tuple(tensors),
                        foreign_globals=tuple(foreign), deep=deep, crc_mismatches=crc_bad, digest=digest,
                        values=tuple(values))
