"""numpy ``.npy`` arrays: the header (magic, version, a dict literal) is all a scan needs.

The header is parsed with :func:`ast.literal_eval`, which evaluates literals only. Object
arrays (``descr`` ``|O``) hold pickles that ``np.load(allow_pickle=False)`` refuses; they are
reported as foreign globals rather than read.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass

from cachedoctor.formats import _deep
from cachedoctor.formats._dtypes import numpy_descr_to_dtype
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta

MAGIC = b"\x93NUMPY"
_MAX_HEADER = 1 << 16


@dataclass(frozen=True, slots=True)
class NpyHeader:
    dtype: str
    itemsize: int
    shape: tuple[int, ...]
    fortran_order: bool
    data_start: int  # bytes from the start of the .npy stream to its data
    is_object: bool

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for s in self.shape:
            n *= s
        return n


def parse_header(head: bytes, where: str) -> NpyHeader:
    """Parse the header at the start of ``head`` (which must hold all of it)."""
    if head[:6] != MAGIC:
        raise ReadError("bad-header", f"{where}: not a .npy array (magic missing)")
    if len(head) < 10:
        raise ReadError("truncated", f"{where}: .npy header cut short")
    major = head[6]
    if major == 1:
        (hlen,), start = struct.unpack_from("<H", head, 8), 10
    elif major in (2, 3):
        if len(head) < 12:
            raise ReadError("truncated", f"{where}: .npy header cut short")
        (hlen,), start = struct.unpack_from("<I", head, 8), 12
    else:
        raise ReadError("bad-header", f"{where}: unknown .npy version {major}")
    if hlen > _MAX_HEADER:
        raise ReadError("bad-header", f"{where}: .npy header of {hlen} bytes is implausible")
    if len(head) < start + hlen:
        raise ReadError("truncated", f"{where}: .npy header cut short")
    text = head[start:start + hlen].decode("latin1" if major < 3 else "utf-8", "replace")
    try:
        fields = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        raise ReadError("bad-header", f"{where}: .npy header is not a literal dict ({type(exc).__name__})") from None
    if not isinstance(fields, dict) or not {"descr", "fortran_order", "shape"} <= fields.keys():
        raise ReadError("bad-header", f"{where}: .npy header lacks descr/fortran_order/shape")
    shape = fields["shape"]
    if not isinstance(shape, tuple) or not all(type(s) is int and s >= 0 for s in shape):
        raise ReadError("bad-header", f"{where}: .npy shape {shape!r:.60} is not a tuple of sizes")
    descr = fields["descr"]
    is_object = descr in ("|O", "O", "<O", ">O")
    if is_object:
        dtype, itemsize = "object", 8
    elif isinstance(descr, str):
        try:
            dtype, itemsize = numpy_descr_to_dtype(descr)
        except ValueError as exc:
            raise ReadError("bad-header", f"{where}: {exc}") from None
    else:
        dtype, itemsize = "numpy:structured", 1
    return NpyHeader(dtype, itemsize, shape, bool(fields["fortran_order"]), start + hlen, is_object)


def tensor_from(key: str, storage: str, header: NpyHeader, data_bytes: int) -> TensorMeta:
    """Describe an array: its record holds ``data_bytes`` bytes after the header."""
    numel = 1
    for s in header.shape:
        numel *= s
    return TensorMeta(key=key, shape=header.shape, dtype=header.dtype, itemsize=header.itemsize,
                      storage=storage, storage_numel=numel, record_bytes=data_bytes)


def with_nonfinite(t: TensorMeta, header: NpyHeader, data: memoryview) -> TensorMeta:
    """Count NaN/Inf when the record holds all the data; ``data`` starts after the header."""
    from dataclasses import replace

    if header.fortran_order or header.is_object or t.storage_numel is None:
        return t
    if len(data) < header.nbytes:
        return t
    count = _deep.count_nonfinite(data, t.dtype, t.storage_numel, 0, t.shape, None)
    return t if count is None else replace(t, nonfinite=count)


class NpyReader(FormatReader):
    name = "npy"

    def claims(self, head: bytes, src: Source) -> bool:
        return head[:6] == MAGIC

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        header = parse_header(src.read_at(0, 12 + _MAX_HEADER), path)
        tensor = tensor_from("", "", header, src.size - header.data_start)
        foreign = ("numpy object array (pickled)",) if header.is_object else ()
        digest = None
        if deep and isinstance(src, BufferSource):
            tensor = with_nonfinite(tensor, header, src.buffer[header.data_start:])
            digest = _deep.digest(src.buffer)
        return FileMeta(path, self.name, src.size, container="tensor", tensors=(tensor,),
                        foreign_globals=foreign, deep=deep, digest=digest)
