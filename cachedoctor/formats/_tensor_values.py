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
- **the other contiguous float formats:** the general path's probe (:func:`_deep._count_flat`,
  two read-only maxima of the bits, which also bound a bfloat16 tensor's values), called with
  the plan it keeps.

The statistics of a finite latent are :func:`_channel_stats.grid_stats` on the planned grid.
Anything else (a NaN or an Inf, values the bound does not cover, a misaligned tensor, a view,
a complex tensor, a few words, storage the view does not fit, an exact-pattern format) takes
the general path (:func:`_general`: :func:`_deep.nonfinite_and_bound`, then
:func:`_channel_stats.channel_stats`), so every count and every statistic is the general path's,
byte for byte; only the time differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from cachedoctor.formats import _channel_stats as stats_of
from cachedoctor.formats import _deep
from cachedoctor.formats._deep import lazy_numpy, nonfinite_and_bound

_MAX_WORDS = 1 << 18  # the general path's slice: beyond it the bound above is not claimed
_MIN_WORDS = 64  # below this the general path's word-by-word count costs less than numpy's set-up
_LIMIT = float(2**110)  # a sum of squares below it bounds every value within +-2^56 (see above)
_DOT = frozenset({"float32", "float64"})


class _Job(NamedTuple):
    """One tensor layout's pass: the flat view, its probe, then (for a latent) its grid."""

    word: str  # the flat view: the floats themselves (a dot product) or their bits (the probe)
    words: int
    start: int  # the view's first byte in the storage
    need: int  # bytes the storage must hold (the general path's fit check)
    dot: bool
    plan: _deep._Plan  # the general path's probe and count
    grid: stats_of._Grid | None  # ``None``: no latent, no statistics


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
    if job is None or len(buffer) < job.need:
        return _general(key, buffer, dtype, numel, offset, shape, stride)
    np = lazy_numpy()
    flat = np.frombuffer(buffer, job.word, job.words, job.start)
    if not flat.flags.aligned:
        return _general(key, buffer, dtype, numel, offset, shape, stride)  # it aligns the next read
    if job.dot:
        found, bounded = (0, True) if np.vdot(flat, flat) < _LIMIT else (None, False)  # NaN compares False
    else:
        found, bounded = _deep._count_flat(np, flat, job.plan)
    if found != 0:  # a NaN or Inf (or a dot product that cannot tell): counted as the general path counts
        return _general(key, buffer, dtype, numel, offset, shape, stride)
    if job.grid is None:
        return 0, None
    if not (bounded or dtype in stats_of._SMALL):  # the general path's overflow-checked sums
        return 0, stats_of.channel_stats(key, buffer, dtype, offset, shape, stride)
    return 0, stats_of.grid_stats(np, job.grid, buffer, job.start, dtype, True)


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
        return None  # another dtype, a view, no element, complex, or an exact-pattern rule
    words = plan.last - plan.first
    if not _MIN_WORDS <= words <= _MAX_WORDS:
        return None
    dot = dtype in _DOT
    word = stats_of._WORD[dtype] if dot else plan.word
    grid = stats_of._grid(key, dtype, shape, stride) if dtype in stats_of._WORD else None
    return _Job(word, words, plan.first * plan.itemsize, plan.words * plan.itemsize, dot, plan, grid)
