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
from cachedoctor.formats._dtypes import numpy_descr_to_dtype
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._tensor_values import tensor_values
from cachedoctor.formats._verdict import LOADERS, screen
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta
from cachedoctor.records import record

MAGIC = b"\x93NUMPY"
#: The longest ``.npy`` header parsed: ``literal_eval`` (and numpy's Python-2 retry, which
#: tokenizes) of 256 KiB of dense fields takes about a second, of 1 MiB several. numpy reads up
#: to 10,000 bytes, and any length with ``allow_pickle=True``; a real cache's header is about
#: 128 bytes, a 400-field structured dtype's about 8 KB. Longer: cannot be shown safe.
MAX_HEADER = 256 << 10
_MEMO_TEXT = 16 << 10


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


def header_end(head: bytes, where: str) -> int:
    """Where the data starts (magic, version, length field and header), from the stream's first
    12 bytes; a header past :data:`MAX_HEADER` raises :class:`HeaderTooLarge`."""
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
    if hlen > MAX_HEADER:
        raise HeaderTooLarge(where, hlen)
    return start + hlen


class HeaderTooLarge(ReadError):
    """A header longer than this scanner parses. ``np.load(allow_pickle=True)`` drops numpy's
    own header limit (10,000 bytes otherwise), so such a header may describe an object array:
    the file cannot be shown safe (:func:`unproven`)."""

    def __init__(self, where: str, length: int) -> None:
        super().__init__("bad-header", f"{where}: .npy header of {length:,} bytes, past the {MAX_HEADER:,} parsed")
        self.length = length


def unproven(where: str, why: str) -> str:
    """The name under which a file that a loader would read but this scanner cannot follow is
    reported: ``unsafe-pickle``, never only ``corrupt-archive`` (it fails closed)."""
    return f"{where + ': ' if where else ''}cannot be shown safe: {why}"


def parse_header(head: bytes, where: str) -> NpyHeader:
    """Parse the header at the start of ``head`` (which must hold all of it)."""
    end = header_end(head, where)
    if len(head) < end:
        raise ReadError("truncated", f"{where}: .npy header cut short")
    major = head[6]
    start = 10 if major == 1 else 12
    text = head[start:end].decode("latin1" if major < 3 else "utf-8", "replace")
    # memoised only for headers of a real cache's size: 1,024 long ones would hold 256 MiB
    fields = _fields(text, major < 3) if len(text) <= _MEMO_TEXT else _fields.__wrapped__(text, major < 3)
    if isinstance(fields, str):
        raise ReadError("bad-header", f"{where}: {fields}")
    dtype, itemsize, shape, fortran_order, is_object = fields
    return NpyHeader(dtype, itemsize, shape, fortran_order, end, is_object)


@lru_cache(maxsize=1024)
def _fields(text: str, py2_longs: bool = True) -> tuple[str, int, tuple[int, ...], bool, bool] | str:
    """``(dtype, itemsize, shape, fortran_order, is_object)`` of a header's dict literal, or
    what is wrong with it. Memoised on the text: the arrays of a cache repeat a few headers,
    and ``literal_eval`` parses Python each time (most of an npz read).

    As numpy's ``_read_array_header``: a header of version 1 or 2 that is no literal is read
    again without the ``L`` suffix of Python 2 longs (``(1L,)``); the object dtype is decided
    before the shape is checked, and an object array's shape only needs to be a tuple of ints
    (``(True,)`` and ``(-1,)`` pass numpy's check, and it unpickles without using the shape).
    """
    fields = _literal(text)
    if isinstance(fields, str) and py2_longs and "L" in text:
        fields = _literal(_drop_py2_longs(text))
    if isinstance(fields, str):
        return fields
    if not isinstance(fields, dict) or not {"descr", "fortran_order", "shape"} <= fields.keys():
        return ".npy header lacks descr/fortran_order/shape"
    shape = fields["shape"]
    descr = fields["descr"]
    is_object = has_object(descr)
    if is_object:
        if not isinstance(shape, tuple) or not all(isinstance(s, int) for s in shape):
            return f".npy shape {shape!r:.60} is not a tuple of ints (numpy refuses it before unpickling)"
        return "object", 8, tuple(int(s) for s in shape), bool(fields["fortran_order"]), True
    if not isinstance(shape, tuple) or not all(type(s) is int and s >= 0 for s in shape):
        return f".npy shape {shape!r:.60} is not a tuple of sizes"
    if isinstance(descr, str):
        try:
            dtype, itemsize = numpy_descr_to_dtype(descr)
        except ValueError as exc:
            return str(exc)
    else:
        dtype, itemsize = "numpy:structured", 1
    return dtype, itemsize, shape, bool(fields["fortran_order"]), False


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
        return f".npy header is not a literal dict ({type(exc).__name__})"


def _drop_py2_longs(text: str) -> str:
    """``text`` without the ``L`` name token that directly follows a number token (Python 2's
    long suffix), as numpy filters a version 1/2 header before parsing it a second time."""
    import io
    import tokenize

    kept: list[tuple[int, str]] = []
    after_number = False
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if after_number and tok.type == tokenize.NAME and tok.string == "L":
                continue  # numpy keeps "after a number" set here too
            kept.append((tok.type, tok.string))
            after_number = tok.type == tokenize.NUMBER
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text
    return tokenize.untokenize(kept)


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


def tensor_from(
    key: str, storage: str, header: NpyHeader, data_bytes: int, data: memoryview | None = None
) -> TensorMeta:
    """Describe an array: its record holds ``data_bytes`` bytes after the header. With ``data``
    (a deep read: the bytes after the header), also its NaN/Inf count and, for a finite latent,
    its per-channel statistics, where the record holds all of the array's data."""
    numel = 1
    for s in header.shape:
        numel *= s
    nonfinite = stats = None
    if data is not None and not (header.fortran_order or header.is_object) and len(data) >= header.nbytes:
        nonfinite, stats = tensor_values(key, data, header.dtype, numel, 0, header.shape, None)
    return TensorMeta(
        key=key,
        shape=header.shape,
        dtype=header.dtype,
        itemsize=header.itemsize,
        storage=storage,
        storage_numel=numel,
        record_bytes=data_bytes,
        nonfinite=nonfinite,
        stats=stats,
    )


class NpyReader(FormatReader):
    name = "npy"

    def claims(self, head: bytes, src: Source) -> bool:
        return head[:6] == MAGIC

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        try:
            header = parse_header(src.read_at(0, header_end(src.read_at(0, 12), path)), path)
        except HeaderTooLarge as exc:
            return FileMeta(
                path,
                self.name,
                src.size,
                foreign_globals=(unproven("", exc.message + "; np.load(allow_pickle=True) reads any length"),),
                loaders=LOADERS[self.name],
                unreadable_reason=exc.message,
            )
        deep_data = src.buffer[header.data_start :] if deep and isinstance(src, BufferSource) else None
        tensor = tensor_from("", "", header, src.size - header.data_start, deep_data)
        foreign: tuple[str, ...] = ()
        if header.is_object:
            size = min(src.size - header.data_start, LIMITS.pickle_bytes + 1)
            foreign = tuple(object_globals("", src.read_at(header.data_start, size)))
        digest = None
        if deep and isinstance(src, BufferSource):
            digest = _deep.file_digest(src)
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
