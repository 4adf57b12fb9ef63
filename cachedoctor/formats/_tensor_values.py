"""The deep pass over one tensor's values, as every reader runs it: NaN/Inf, then channel statistics.

:func:`tensor_values` is the readers' one call. Why a module of its own: a cache is millions of tensors of a handful of layouts, nearly all
contiguous float32, and for a latent of a few dozen KB numpy's per-call set-up (several
thousand instructions before a call touches a byte) costs more than the passes themselves. So
the work for one layout is planned once (:class:`_Job`, memoised on the layout), and the whole
tensor is checked by one BLAS dot product of it with itself instead of two integer maxima:

- the sum of the squares is finite exactly when no element is NaN or Inf and no square or
  partial sum overflowed (a NaN or an Inf square makes every sum that includes it NaN or Inf);
- each rounding of a sum of non-negative terms lowers it by at most a factor ``1 - u`` (``u``:
  2^-24 for float32), so over at most 2^18 terms (:data:`_MAX_WORDS`) the sum is at least 98 %
  of the largest square: a sum below 2^110 puts every value strictly within +-2^56, the bound
  under which the channel statistics sum in float32 without an overflow check
  (:func:`_channel_stats.channel_stats`).

Anything else (a NaN, an Inf, larger values, another dtype, a view, a misaligned tensor, a
storage the view does not fit) takes the general path (:func:`_general`: the bit-pattern count
of :func:`_deep.nonfinite_and_bound`, then :func:`_channel_stats.channel_stats`), so every count
and every statistic is the general path's, byte for byte; only the time differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from cachedoctor.formats import _channel_stats as stats_of
from cachedoctor.formats._deep import contiguous_strides, lazy_numpy, nonfinite_and_bound

_MAX_WORDS = 1 << 18  # the general path's slice: beyond it the bound above is not claimed
_MIN_WORDS = 64  # below this the general path's word-by-word count costs less than a dot product
_LIMIT = float(2**110)  # a sum of squares below it bounds every value within +-2^56 (see above)
_FLOATS = {"float32": ("<f4", 4), "float64": ("<f8", 8)}


class _Job(NamedTuple):
    """One tensor layout's pass: the flat values, then (for a latent) its sampled grid."""

    word: str
    words: int  # elements of the view
    start: int  # its first byte in the storage
    need: int  # bytes the storage must hold (the general path's fit check)
    #: the grid (``None`` when the tensor is no latent): the strided view numpy builds on the
    #: buffer, where its values go, the block of values over squares, and the finished numbers
    grid_shape: tuple[int, int, int] | None
    grid_strides: tuple[int, int, int]
    rows_in: Any
    values: Any
    squares: Any
    block: Any
    ones: Any
    channels: int
    n: int
    packed: Callable[[list[float], int, int], bytes]


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
        vdot = np.vdot  # not ndarray.dot: an overflow warns there, unseen here (the general path then judges)
        flat = np.frombuffer(buffer, job.word, job.words, job.start)
        if flat.flags.aligned and vdot(flat, flat) < _LIMIT:  # NaN compares False: the general path
            if job.grid_shape is None:
                return 0, None
            job.rows_in[...] = np.ndarray(job.grid_shape, job.word, buffer, job.start, job.grid_strides)
            np.multiply(job.values, job.values, out=job.squares)
            return 0, job.packed((job.block @ job.ones).tolist(), job.channels, job.n)
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
    found = _FLOATS.get(dtype)
    if found is None:
        return None
    word, itemsize = found
    count = 1
    for s in shape:
        count *= s
    if not _MIN_WORDS <= count <= _MAX_WORDS or offset + count > numel:
        return None
    if stride is not None and stride != contiguous_strides(shape):
        return None
    start, need = offset * itemsize, numel * itemsize
    grid = stats_of._grid(key, dtype, shape, stride)
    if grid is None:
        return _Job(
            word, count, start, need, None, (0, 0, 0), None, None, None, None, None, 0, 0, stats_of._packed_finite
        )
    if grid.n > stats_of._MAX_N or grid.word != word:
        return None  # the general path's overflow-checked sums
    block, rows_in, _, values, squares, ones = stats_of._scratch(*grid.shape, False)
    return _Job(
        word,
        count,
        start,
        need,
        grid.shape,
        grid.strides,
        rows_in,
        values,
        squares,
        block,
        ones,
        grid.channels,
        grid.n,
        stats_of._packed_finite,
    )
