"""Deep-mode data checks: CRC-32 of zip members, NaN/Inf counts, and the file digest.

These read tensor bytes, so they run only under ``--deep``. numpy is imported here and only
here (lazily), never torch. The data part of a deep scan should run at the speed of memory:
every check is one SIMD pass over bytes that are already in the CPU cache (the file was just
read), NaN/Inf are found on the bit patterns of every float format (two integer passes into a
reused scratch buffer, no float arithmetic, no temporaries), and a large tensor is checked in
slices that stay in the cache. What is left per file is a handful of Python calls.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal, NamedTuple

from cachedoctor.formats._deep_members import Members as Members  # re-exported: the readers' one import
from cachedoctor.formats._dtypes import NONFINITE_RULE
from cachedoctor.formats._source import BufferSource

_SLICE = 1 << 18  # elements checked per numpy call: 256 Ki, at most 2 MiB of scratch (8-byte floats)
_scratch: dict[str, Any] = {}  # numpy dtype -> reused buffer of _SLICE elements (per process)
_ALIGN_FROM = 16 << 10  # tensors worth aligning the next read for


def digest(buffer: memoryview) -> str:
    """xxh3-128 of the whole file, hex: what the state database keeps of a deep read."""
    global _xxh3
    if _xxh3 is None:
        import xxhash

        _xxh3 = xxhash.xxh3_128_hexdigest
    return _xxh3(buffer)


_xxh3: Any = None


def file_digest(src: BufferSource) -> str | None:
    """:func:`digest` of the source's bytes, or ``None`` where its reader does not want it."""
    return digest(src.buffer) if src.digest else None


def count_nonfinite(
    buffer: memoryview, dtype: str, numel: int, offset: int, shape: Sequence[int], stride: Sequence[int] | None
) -> int | None:
    """NaN/Inf elements in the view (``offset``/``shape``/``stride``) of a storage of ``numel``.

    ``buffer`` starts at the storage's first byte. Returns ``None`` for non-floating dtypes
    and for views that do not fit their storage (reported as corruption elsewhere).
    """
    return nonfinite_and_bound(buffer, dtype, numel, offset, shape, stride)[0]


def nonfinite_and_bound(
    buffer: memoryview, dtype: str, numel: int, offset: int, shape: Sequence[int], stride: Sequence[int] | None
) -> tuple[int | None, bool]:
    """:func:`count_nonfinite`, and whether every value of the view is known to lie strictly
    within +-2^56 (the bound the channel statistics need to sum squares in float32 without an
    overflow check): the two maxima that show a float32 or bfloat16 tensor finite also bound
    its magnitudes, for free. ``False`` means not known, not out of bounds."""
    plan = _plan(dtype, numel, offset, tuple(shape), None if stride is None else tuple(stride))
    if plan is None or plan.words * plan.itemsize > len(buffer):
        return None, False
    if plan.empty:
        return 0, False
    if plan.tiny and buffer.format == "B":
        return _count_tiny(buffer, plan), False
    np = lazy_numpy()
    if plan.strides is None:
        flat = np.frombuffer(buffer, dtype=plan.word, count=plan.last - plan.first, offset=plan.first * plan.itemsize)
        found, bounded = _count_flat(np, flat, plan)
        if plan.parts == 1 or found == 0:
            return found, bounded  # a complex number with no non-finite part is finite
        view = flat.reshape(-1, 2)
    else:
        storage = np.frombuffer(buffer, dtype=plan.word, count=plan.words)
        view = np.lib.stride_tricks.as_strided(
            storage[plan.first :], shape=plan.shape, strides=plan.strides, writeable=False
        )
    hits = (view == plan.limit) if plan.exact else ((view & plan.mask) >= plan.limit)
    return int(np.count_nonzero(hits.any(axis=-1) if plan.parts == 2 else hits)), False


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
    #: The probe of :func:`_count_flat`: a word whose unsigned value reaches ``top``, or (with
    #: ``signed``, the signed dtype of the same width) whose signed value reaches ``limit``, is
    #: non-finite, and only such words are. ``top`` is ``None`` for the rules it cannot express.
    top: int | None
    signed: str | None
    #: a contiguous view of a few plain words (``original_size``, ``crop_ltrb``, ``time_ids``):
    #: counted in Python, cheaper than setting up numpy's passes (little-endian hosts)
    tiny: bool
    #: the bits of 2^56 in this format (0 where not kept): a finite view whose signed maximum is
    #: below it and whose unsigned maximum is below ``sign + bound`` holds only values within
    #: +-2^56 (the probe's maxima, read as magnitudes; see :func:`nonfinite_and_bound`)
    bound: int


def _probe(word: str, mask: int, limit: int, exact: bool) -> tuple[int | None, str | None]:
    """``(top, signed)`` of a rule (see :class:`_Plan`). Where the mask keeps every bit but the
    sign (IEEE formats: ``bits & mask`` is the magnitude), ``bits & mask >= limit`` holds for a
    word with the sign clear exactly when its signed value is ``>= limit``, and for a word with
    the sign set exactly when its unsigned value is ``>= sign + limit``: the two maxima tell,
    both read-only passes. Where the mask keeps every bit, the unsigned maximum alone does."""
    if exact:
        return None, None
    bits = int(word[-1]) * 8
    sign = 1 << (bits - 1)
    if mask == (1 << bits) - 1:
        return limit, None
    if mask == sign - 1 and 0 < limit < sign:
        return sign + limit, "<i" + word[-1]
    return None, None


@lru_cache(maxsize=1024)
def _plan(dtype: str, numel: int, offset: int, shape: tuple[int, ...], stride: tuple[int, ...] | None) -> _Plan | None:
    rule = NONFINITE_RULE.get(dtype)
    if rule is None:
        return None
    word, mask, limit, exact = rule
    top, signed = _probe(word, mask, limit, exact)
    itemsize = int(word[-1])
    parts = 2 if dtype.startswith("complex") else 1  # a complex element is two floats
    words = numel * parts
    count = 1
    for s in shape:
        count *= s
    if count == 0:
        return _Plan(word, itemsize, mask, limit, exact, parts, words, 0, 0, shape, None, True, top, signed, False, 0)
    contiguous = contiguous_strides(shape)
    stride = stride if stride is not None else contiguous
    span = 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=False))
    if offset + span > numel:
        return None
    first = offset * parts
    if stride == contiguous:
        last = first + span * parts
        tiny = parts == 1 and last - first <= _TINY and sys.byteorder == "little"
        bound = _BOUND.get(dtype, 0) if signed is not None else 0
        return _Plan(
            word, itemsize, mask, limit, exact, parts, words, first, last, shape, None, False, top, signed, tiny, bound
        )
    strides = (*(s * itemsize * parts for s in stride), itemsize)
    shaped = (*shape, parts)
    return _Plan(
        word, itemsize, mask, limit, exact, parts, words, first, 0, shaped, strides, False, top, signed, False, 0
    )


#: Where the next file goes in the read buffer, past a 64-byte boundary (``formats.read_file``):
#: chosen so that the last file's misaligned tensor would have started on the boundary. numpy
#: runs unaligned arrays through a copying iterator (2-3x slower), and an npz member's data
#: starts wherever its zip header ends; the files of a cache share their layout, so after the
#: first file of a kind the data lands aligned.
placement = 0


def _count_flat(np: Any, flat: Any, plan: _Plan) -> tuple[int, bool]:
    """Non-finite words in a contiguous array, in slices that stay in the CPU cache, and whether
    its values are known bounded (:func:`nonfinite_and_bound`). Each slice is probed first with
    one or two maxima (read-only SIMD passes, :func:`_probe`); only a slice the probe finds
    non-finite words in is masked into a reused buffer and counted."""
    global placement
    if flat.nbytes >= _ALIGN_FROM and not flat.flags.aligned:
        placement = (placement - flat.ctypes.data) % 64
    if plan.exact:
        return int(np.count_nonzero(flat == plan.limit)), False
    top, signed, limit = plan.top, plan.signed, plan.limit
    peak = np.maximum.reduce  # not ndarray.max(): its Python wrapper costs as much as the pass
    if flat.size <= _SLICE and top is not None:  # the usual tensor: one slice
        high = peak(flat)
        if high < top:
            if signed is None:
                return 0, False
            low = peak(flat.view(signed))
            if low < limit:
                bound = plan.bound
                return 0, bound > 0 and low < bound and high < top - limit + bound  # top - limit: the sign bit
        return _count_masked(np, flat, plan), False
    found = 0
    for start in range(0, flat.size, _SLICE):
        part = flat[start : start + _SLICE]
        if top is not None and peak(part) < top and (signed is None or peak(part.view(signed)) < limit):
            continue
        found += _count_masked(np, part, plan)
    return found, False


def _count_tiny(buffer: memoryview, plan: _Plan) -> int:
    """:func:`_count_flat` of a tiny contiguous view, word by word in Python."""
    words = buffer[plan.first * plan.itemsize : plan.last * plan.itemsize].cast(_WORD_CODE[plan.itemsize])
    mask, limit = plan.mask, plan.limit
    if plan.exact:
        return sum(1 for w in words if w == limit)
    return sum(1 for w in words if (w & mask) >= limit)


#: the bits of 2^56 (see :attr:`_Plan.bound`), for the formats whose values may exceed it
_BOUND = {"float32": (56 + 127) << 23, "bfloat16": (56 + 127) << 7, "float64": (56 + 1023) << 52}
_TINY = 32  # words: below this, Python's loop costs less than numpy's set-up
_WORD_CODE: dict[int, Literal["B", "H", "I", "Q"]] = {1: "B", 2: "H", 4: "I", 8: "Q"}  # memoryview.cast's


def _count_masked(np: Any, part: Any, plan: _Plan) -> int:
    """Words of ``part`` (at most :data:`_SLICE`) whose masked bits reach the rule's limit."""
    scratch = _scratch.get(part.dtype.str)
    if scratch is None:
        scratch = _scratch[part.dtype.str] = np.empty(_SLICE, dtype=part.dtype)
    masked = scratch[: part.size]
    np.bitwise_and(part, plan.mask, out=masked)
    if np.maximum.reduce(masked) < plan.limit:
        return 0
    return int(np.count_nonzero(masked >= plan.limit))


def lazy_numpy() -> Any:
    """numpy, imported on the first deep check (a quick scan never loads it)."""
    global _np
    if _np is None:
        import numpy

        _np = numpy
    return _np


_np: Any = None


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The element strides of a C-contiguous tensor of ``shape``."""
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))
