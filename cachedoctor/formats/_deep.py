"""Deep-mode data checks: CRC-32 of zip members, NaN/Inf counts, and the file digest.

These read tensor bytes, so they run only under ``--deep``. numpy is imported here and only
here (lazily), never torch. The data part of a deep scan should run at the speed of memory:
every check is one SIMD pass over bytes that are already in the CPU cache (the file was just
read), NaN/Inf are found on the bit patterns of every float format (two integer passes into a
reused scratch buffer, no float arithmetic, no temporaries), and a large tensor is checked in
slices that stay in the cache. What is left per file is a handful of Python calls.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

try:  # ISA-L's CRC-32 is the same polynomial as zlib's, about six times faster (SIMD)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal has wheels for the common platforms
    from zlib import crc32

from cachedoctor.formats._dtypes import NONFINITE_RULE
from cachedoctor.formats._source import BufferSource
from cachedoctor.formats._zip import STORED, ZipDirectory, inflated_crc, local_name_differs
from cachedoctor.formats.interface import MemberCrc, ReadError

_SLICE = 1 << 18  # elements checked per numpy call: 256 Ki, at most 2 MiB of scratch (8-byte floats)
_scratch: dict[str, Any] = {}
_ALIGN_FROM = (
    16 << 10
)  # tensors worth aligning the next read for  # numpy dtype -> reused buffer of _SLICE elements (per process)


def digest(buffer: memoryview) -> str:
    """xxh3-128 of the whole file, hex: what the state database keeps of a deep read."""
    global _xxh3
    if _xxh3 is None:
        import xxhash

        _xxh3 = xxhash.xxh3_128_hexdigest
    return _xxh3(buffer)


_xxh3: Any = None


class Members:
    """What a deep read learns from the members' own bytes, in one pass over them: where each
    one's data starts (its local header), which local headers carry another name than the
    central directory (miniz reads those anyway, zipfile refuses), and which members fail the
    CRC-32 the central directory records (torch.load never checks it)."""

    __slots__ = ("crc_bad", "renamed", "starts")

    def __init__(self, src: BufferSource, directory: ZipDirectory) -> None:
        self.starts: dict[str, int] = {}
        self.renamed: list[str] = []
        crc_bad: list[MemberCrc] = []
        buffer, size = src.buffer, src.size
        winners, unpack = directory.members, _LOCAL_HEAD.unpack_from
        for member in directory.entries:
            at = member.header_offset
            if at + 30 > size:
                raise ReadError("truncated", f"file ends before byte {at + 30}")
            signature, nlen, xlen = unpack(buffer, at)
            name = member.name
            if buffer[at + 30 : at + 30 + nlen].tobytes() != name.encode() and local_name_differs(
                buffer[at : min(size, at + 30 + nlen)].tobytes(), member
            ):
                self.renamed.append(name)
            if winners[name] is not member:
                continue  # zipfile reads the last entry of a name; torch.load's pick is judged elsewhere
            if signature != b"PK\x03\x04":
                raise ReadError("bad-zip", f"local header of {name} is damaged")
            start = self.starts[name] = at + 30 + nlen + xlen
            data = buffer[start : start + member.compressed_size]
            if len(data) != member.compressed_size:
                raise ReadError("truncated", f"file ends before byte {start + member.compressed_size}")
            actual = crc32(data) if member.method == STORED else inflated_crc(data, member)  # streamed: bounded
            if actual != member.crc:
                crc_bad.append(MemberCrc(name, member.crc, actual))
        self.crc_bad = tuple(crc_bad)


_LOCAL_HEAD = struct.Struct("<4s22xHH")


def count_nonfinite(
    buffer: memoryview, dtype: str, numel: int, offset: int, shape: Sequence[int], stride: Sequence[int] | None
) -> int | None:
    """NaN/Inf elements in the view (``offset``/``shape``/``stride``) of a storage of ``numel``.

    ``buffer`` starts at the storage's first byte. Returns ``None`` for non-floating dtypes
    and for views that do not fit their storage (reported as corruption elsewhere).
    """
    plan = _plan(dtype, numel, offset, tuple(shape), None if stride is None else tuple(stride))
    if plan is None or plan.words * plan.itemsize > len(buffer):
        return None
    if plan.empty:
        return 0
    import numpy as np

    storage = np.frombuffer(buffer, dtype=plan.word, count=plan.words)
    if plan.strides is None:
        flat = storage[plan.first : plan.last]
        found = _count_flat(np, flat, plan.mask, plan.limit, plan.exact)
        if plan.parts == 1 or found == 0:
            return found  # a complex number with no non-finite part is finite
        view = flat.reshape(-1, 2)
    else:
        view = np.lib.stride_tricks.as_strided(
            storage[plan.first :], shape=plan.shape, strides=plan.strides, writeable=False
        )
    hits = (view == plan.limit) if plan.exact else ((view & plan.mask) >= plan.limit)
    return int(np.count_nonzero(hits.any(axis=-1) if plan.parts == 2 else hits))


class _Plan(NamedTuple):
    """How to check one tensor layout: files of one bucket share it, so it is worked out once."""

    word: str  # the unsigned numpy dtype the bits are read as
    itemsize: int
    mask: int
    limit: int
    exact: bool
    parts: int  # words per element: 2 for complex
    words: int  # words in the storage
    first: int  # the view's first word
    last: int  # one past its last word (contiguous views)
    shape: tuple[int, ...]  # strided views: the shape and byte strides as_strided takes
    strides: tuple[int, ...] | None
    empty: bool  # the view has no element


@lru_cache(maxsize=1024)
def _plan(dtype: str, numel: int, offset: int, shape: tuple[int, ...], stride: tuple[int, ...] | None) -> _Plan | None:
    rule = NONFINITE_RULE.get(dtype)
    if rule is None:
        return None
    word, mask, limit, exact = rule
    itemsize = int(word[-1])
    parts = 2 if dtype.startswith("complex") else 1  # a complex element is two floats
    words = numel * parts
    count = 1
    for s in shape:
        count *= s
    if count == 0:
        return _Plan(word, itemsize, mask, limit, exact, parts, words, 0, 0, shape, None, True)
    contiguous = contiguous_strides(shape)
    stride = stride if stride is not None else contiguous
    span = 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=False))
    if offset + span > numel:
        return None
    first = offset * parts
    if stride == contiguous:
        return _Plan(word, itemsize, mask, limit, exact, parts, words, first, first + span * parts, shape, None, False)
    strides = (*(s * itemsize * parts for s in stride), itemsize)
    return _Plan(word, itemsize, mask, limit, exact, parts, words, first, 0, (*shape, parts), strides, False)


#: Where the next file goes in the read buffer, past a 64-byte boundary (``formats.read_file``):
#: chosen so that the last file's misaligned tensor would have started on the boundary. numpy
#: runs unaligned arrays through a copying iterator (2-3x slower), and an npz member's data
#: starts wherever its zip header ends; the files of a cache share their layout, so after the
#: first file of a kind the data lands aligned.
placement = 0


def _count_flat(np: Any, flat: Any, mask: int, limit: int, exact: bool) -> int:
    """Non-finite words in a contiguous array, in slices that stay in the CPU cache: mask into
    a reused buffer and take its maximum (both SIMD); count only when the maximum says so."""
    global placement
    if not flat.flags.aligned and flat.nbytes >= _ALIGN_FROM:
        placement = (placement - flat.ctypes.data) % 64
    if exact:
        return int(np.count_nonzero(flat == limit))
    scratch = _scratch.get(flat.dtype.str)
    if scratch is None:
        scratch = _scratch[flat.dtype.str] = np.empty(_SLICE, dtype=flat.dtype)
    found = 0
    for start in range(0, flat.size, _SLICE):
        part = flat[start : start + _SLICE]
        masked = scratch[: part.size]
        np.bitwise_and(part, mask, out=masked)
        if masked.max() >= limit:
            found += int(np.count_nonzero(masked >= limit))
    return found


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The element strides of a C-contiguous tensor of ``shape``."""
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))
