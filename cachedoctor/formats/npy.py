"""numpy ``.npy`` arrays: the header (magic, version, a dict literal) is all a scan needs.

The header is parsed with :func:`ast.literal_eval`, which evaluates literals only. Object
arrays hold pickles that ``np.load(allow_pickle=False)`` refuses and ``allow_pickle=True`` runs;
every descriptor numpy would turn into an object dtype counts (``|O``, ``O8``, ``=O``, a
structured dtype with an object field, a sub-array of objects, ``'i4,O'``), and the pickle
after the header is walked statically for the globals it would import.
"""

from __future__ import annotations

import ast
import struct
from functools import lru_cache

from cachedoctor.formats import _deep
from cachedoctor.formats._channel_stats import channel_stats
from cachedoctor.formats._dtypes import numpy_descr_to_dtype
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._verdict import LOADERS, screen
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta
from cachedoctor.records import record

MAGIC = b"\x93NUMPY"
_MAX_HEADER = 1 << 16


@record
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
    text = head[start : start + hlen].decode("latin1" if major < 3 else "utf-8", "replace")
    fields = _fields(text)
    if isinstance(fields, str):
        raise ReadError("bad-header", f"{where}: {fields}")
    dtype, itemsize, shape, fortran_order, is_object = fields
    return NpyHeader(dtype, itemsize, shape, fortran_order, start + hlen, is_object)


@lru_cache(maxsize=1024)
def _fields(text: str) -> tuple[str, int, tuple[int, ...], bool, bool] | str:
    """``(dtype, itemsize, shape, fortran_order, is_object)`` of a header's dict literal, or
    what is wrong with it. Memoised on the text: the arrays of a cache repeat a few headers,
    and ``literal_eval`` parses Python each time (most of an npz read)."""
    try:
        fields = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        return f".npy header is not a literal dict ({type(exc).__name__})"
    if not isinstance(fields, dict) or not {"descr", "fortran_order", "shape"} <= fields.keys():
        return ".npy header lacks descr/fortran_order/shape"
    shape = fields["shape"]
    if not isinstance(shape, tuple) or not all(type(s) is int and s >= 0 for s in shape):
        return f".npy shape {shape!r:.60} is not a tuple of sizes"
    descr = fields["descr"]
    is_object = has_object(descr)
    if is_object:
        dtype, itemsize = "object", 8
    elif isinstance(descr, str):
        try:
            dtype, itemsize = numpy_descr_to_dtype(descr)
        except ValueError as exc:
            return str(exc)
    else:
        dtype, itemsize = "numpy:structured", 1
    return dtype, itemsize, shape, bool(fields["fortran_order"]), is_object


def has_object(descr: object, depth: int = 0) -> bool:
    """Whether ``np.lib.format.descr_to_dtype(descr)`` would give a dtype holding Python objects.

    Conservative where numpy is lenient: any ``O`` type code or ``object`` name in a string
    descriptor, recursively through sub-arrays ``(descr, shape)`` and fields ``(name, descr[,
    shape])`` (including the odd fields numpy makes of a dict's keys).
    """
    if depth > 16:
        return True  # nesting no real dtype has
    if isinstance(descr, bytes):
        descr = descr.decode("latin1")
    if isinstance(descr, str):
        return "O" in descr or "object" in descr.lower()
    if isinstance(descr, tuple):
        return bool(descr) and has_object(descr[0], depth + 1)
    if isinstance(descr, (list, dict, set, frozenset)):
        for field in descr:
            if (
                isinstance(field, (str, bytes, tuple, list))
                and len(field) in (2, 3)
                and has_object(field[1], depth + 1)
            ):
                return True
        return False
    return False


#: The globals numpy's own object-array pickle names; the rest are listed as unsafe.
_NUMPY_OWN = frozenset(
    {
        "numpy.core.multiarray._reconstruct",
        "numpy._core.multiarray._reconstruct",
        "numpy.ndarray",
        "numpy.dtype",
    }
)
OBJECT_ARRAY = "numpy object array (np.load(allow_pickle=True) unpickles it)"


def object_globals(where: str, data: bytes | memoryview) -> list[str]:
    """What an object array's pickle would run: the label, then every unsafe global in it."""
    found = [OBJECT_ARRAY if not where else f"{where}: {OBJECT_ARRAY}"]
    if data:
        found += [
            name
            for name in screen(where or "object array", bytes(data[: LIMITS.pickle_bytes + 1])).unsafe
            if name not in _NUMPY_OWN
        ]
    return found


def tensor_from(key: str, storage: str, header: NpyHeader, data_bytes: int) -> TensorMeta:
    """Describe an array: its record holds ``data_bytes`` bytes after the header."""
    numel = 1
    for s in header.shape:
        numel *= s
    return TensorMeta(
        key=key,
        shape=header.shape,
        dtype=header.dtype,
        itemsize=header.itemsize,
        storage=storage,
        storage_numel=numel,
        record_bytes=data_bytes,
    )


def with_nonfinite(t: TensorMeta, header: NpyHeader, data: memoryview) -> TensorMeta:
    """Count NaN/Inf when the record holds all the data; ``data`` starts after the header."""
    from dataclasses import replace

    if header.fortran_order or header.is_object or t.storage_numel is None:
        return t
    if len(data) < header.nbytes:
        return t
    count = _deep.count_nonfinite(data, t.dtype, t.storage_numel, 0, t.shape, None)
    if count is None:
        return t
    stats = channel_stats(t.key, data, t.dtype, 0, t.shape, None) if count == 0 else None
    return replace(t, nonfinite=count, stats=stats)


class NpyReader(FormatReader):
    name = "npy"

    def claims(self, head: bytes, src: Source) -> bool:
        return head[:6] == MAGIC

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        header = parse_header(src.read_at(0, 12 + _MAX_HEADER), path)
        tensor = tensor_from("", "", header, src.size - header.data_start)
        foreign: tuple[str, ...] = ()
        if header.is_object:
            size = min(src.size - header.data_start, LIMITS.pickle_bytes + 1)
            foreign = tuple(object_globals("", src.read_at(header.data_start, size)))
        digest = None
        if deep and isinstance(src, BufferSource):
            tensor = with_nonfinite(tensor, header, src.buffer[header.data_start :])
            digest = _deep.digest(src.buffer)
        return FileMeta(
            path,
            self.name,
            src.size,
            container="tensor",
            tensors=() if header.is_object else (tensor,),  # a pickle, not an array: no tensor to check
            foreign_globals=foreign,
            deep=deep,
            digest=digest,
            loaders=LOADERS[self.name] if foreign else (),
        )
