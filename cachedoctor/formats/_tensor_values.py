"""The deep pass over one tensor's values, as every reader runs it: NaN/Inf, then channel statistics.

:func:`tensor_values` is the readers' one call. Why a module of its own: a cache is millions of
tensors of a handful of layouts, and for a latent of a few dozen KB numpy's per-call set-up
(several thousand instructions before a call touches a byte) and the general path's Python cost
more than the passes themselves. So the work for one tensor layout is planned once
(:class:`_Job`, memoised on the layout) and the usual tensor, contiguous and finite, is checked
in the fewest calls:

- **float32, float64:** one BLAS dot product of the tensor with itself (``np.vdot``, which,
  unlike ``ndarray.dot``, prints no warning when it overflows). The sum of the squares is finite
  exactly when no element is NaN or Inf and no square or partial sum overflowed (a NaN or an Inf
  square makes every sum that includes it NaN or Inf). Each rounding of a sum of non-negative
  terms lowers it by at most a factor ``1 - u`` (``u``: 2^-24 for float32), so over at most 2^18
  terms (:data:`_MAX_WORDS`) the sum is at least 98 % of the largest square: a sum below 2^110
  puts every value strictly within +-2^56, the bound under which the channel statistics sum in
  float32 without an overflow check (:func:`_channel_stats.channel_stats`).
- **float16, bfloat16, float8_e4m3fn, float8_e5m2:** the general path's two read-only maxima of
  the bits (:func:`_deep._probe`), which also bound a bfloat16 tensor's values.

Anything else (a NaN, an Inf, larger values, another dtype, a view, a misaligned tensor, a
storage the view does not fit) takes the general path (:func:`_general`: the bit-pattern count
of :func:`_deep.nonfinite_and_bound`, then :func:`_channel_stats.channel_stats`), so every count
and every statistic is the general path's, byte for byte; only the time differs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from cachedoctor.formats import _channel_stats as stats_of
from cachedoctor.formats import _deep
from cachedoctor.formats._deep import lazy_numpy, nonfinite_and_bound

_MAX_WORDS = 1 << 18  # the general path's slice: beyond it the bound above is not claimed
_MIN_WORDS = 64  # below this the general path's word-by-word count costs less than numpy's set-up
_LIMIT = float(2**110)  # a sum of squares below it bounds every value within +-2^56 (see above)
_DOT = {"float32": ("<f4", 4), "float64": ("<f8", 8)}
_MAXIMA = frozenset({"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"})
_CAST, _HIGH_HALF, _TABLE = 0, 1, 2  # how the sampled grid reaches the float32 block


class _Job(NamedTuple):
    """One tensor layout's pass: the flat probe, then (for a latent) its sampled grid."""

    word: str  # the flat view: the floats themselves (a dot product) or their bits (two maxima)
    words: int
    start: int  # the view's first byte in the storage
    need: int  # bytes the storage must hold (the general path's fit check)
    dot: bool
    top: int  # maxima: an unsigned word at or above it is non-finite (see _deep._Plan)
    signed: str  # maxima: the signed view, whose words at or above ``limit`` are non-finite
    limit: int
    bound: int  # maxima: the bits of 2^56 (0: no bound kept)
    small: bool  # fp16 and fp8: no square or sum of the sample can overflow float32
    #: the grid (``grid_shape`` ``None`` when the tensor is no latent): the strided view numpy
    #: builds on the buffer and how it is copied into the float32 block. The block itself is
    #: looked up per call (``_channel_stats._scratch``), not held here: that cache alone bounds
    #: how many blocks a process keeps, whatever shapes a hostile cache holds.
    grid_shape: tuple[int, int, int] | None = None
    grid_word: str = ""
    grid_strides: tuple[int, int, int] = (0, 0, 0)
    copy: int = _CAST
    table: Any = None  # fp8: every value by its bits (256 float32)
    channels: int = 0
    n: int = 0


def tensor_values(
    key: str,
    buffer: memoryview,
    dtype: str,
    numel: int,
    offset: int,
    shape: Sequence[int],
    stride: Sequence[int] | None,
) -> tuple[int | None, bytes | None]:
    """The NaN/Inf count of the view (``offset``/``shape``/``stride``, in elements) of a storage
    of ``numel`` elements that starts at ``buffer``, and, only when that count is 0, the view's
    :func:`~cachedoctor.formats._channel_stats.channel_stats` (``None`` for other tensors)."""
    job = _job(key, dtype, numel, offset, tuple(shape), None if stride is None else tuple(stride))
    if job is not None and len(buffer) >= job.need:
        np = lazy_numpy()
        flat = np.frombuffer(buffer, job.word, job.words, job.start)
        if flat.flags.aligned:  # (a misaligned one: the general path aligns the next read)
            if job.dot:
                finite = bounded = np.vdot(flat, flat) < _LIMIT  # NaN compares False
            else:  # not ndarray.max(): its Python wrapper costs as much as the pass
                high = np.maximum.reduce(flat)
                low = np.maximum.reduce(flat.view(job.signed)) if high < job.top else job.limit
                finite = low < job.limit
                bound = job.bound
                bounded = finite and bound > 0 and low < bound and high < job.top - job.limit + bound
            if finite:
                if job.grid_shape is None:
                    return 0, None
                if not (job.small or bounded):  # the general path's overflow-checked sums
                    return 0, stats_of.channel_stats(key, buffer, dtype, offset, shape, stride)
                part = np.ndarray(job.grid_shape, job.grid_word, buffer, job.start, job.grid_strides)
                block, rows_in, high, values, squares, ones = stats_of._scratch(*job.grid_shape, job.copy == _HIGH_HALF)
                if job.copy == _TABLE:
                    np.take(job.table, part, out=rows_in, mode=stats_of._TAKE)
                elif job.copy == _HIGH_HALF:  # bf16 bits are a float32's upper half, the lower half zero
                    high[...] = part
                else:
                    rows_in[...] = part
                np.multiply(values, values, out=squares)
                return 0, stats_of._packed_finite((block @ ones).tolist(), job.channels, job.n)
    return _general(key, buffer, dtype, numel, offset, shape, stride)


def _general(
    key: str,
    buffer: memoryview,
    dtype: str,
    numel: int,
    offset: int,
    shape: Sequence[int],
    stride: Sequence[int] | None,
) -> tuple[int | None, bytes | None]:
    """Every dtype and view: the bit-pattern count, and the statistics told what its passes
    learned of the values' range."""
    found, bounded = nonfinite_and_bound(buffer, dtype, numel, offset, shape, stride)
    if found != 0:
        return found, None
    return found, stats_of.channel_stats(key, buffer, dtype, offset, shape, stride, bounded=bounded)


@lru_cache(maxsize=1024)
def _job(
    key: str, dtype: str, numel: int, offset: int, shape: tuple[int, ...], stride: tuple[int, ...] | None
) -> _Job | None:
    """The plan for one layout, or ``None`` where only the general path answers."""
    plan = _deep._plan(dtype, numel, offset, shape, stride)
    if plan is None or plan.strides is not None or plan.empty or plan.parts != 1 or plan.exact:
        return None  # another dtype, a view, no element, complex or an exact-pattern rule
    words = plan.last - plan.first
    if not _MIN_WORDS <= words <= _MAX_WORDS:
        return None
    dot = _DOT.get(dtype)
    if dot is None and (dtype not in _MAXIMA or plan.top is None or plan.signed is None):
        return None
    word = dot[0] if dot is not None else plan.word
    small = dtype in stats_of._SMALL
    start, need = plan.first * plan.itemsize, plan.words * plan.itemsize
    top, signed, limit, bound = plan.top or 0, plan.signed or "", plan.limit, plan.bound
    grid = stats_of._grid(key, dtype, shape, stride)
    if grid is None:
        return _Job(word, words, start, need, dot is not None, top, signed, limit, bound, small)
    bf16 = dtype == "bfloat16"
    if grid.n > stats_of._MAX_N or (bf16 and sys.byteorder != "little"):
        return None
    copy, table = _CAST, None
    if bf16:
        copy = _HIGH_HALF
    elif dtype in stats_of._FP8:
        copy, table = _TABLE, stats_of._table(dtype)
    return _Job(
        word,
        words,
        start,
        need,
        dot is not None,
        top,
        signed,
        limit,
        bound,
        small,
        grid.shape,
        grid.word,
        grid.strides,
        copy,
        table,
        grid.channels,
        grid.n,
    )
