"""The robust scores ``distribution-outlier`` judges a folder's latents by, from their recorded
per-channel means and standard deviations (``2*C`` little-endian float32 per file).

Two implementations of one computation, tested to give the same numbers to the bit
(``tests/unit/checks/test_distribution_outlier.py``): numpy's, used when numpy is already loaded
(a deep scan loads it for its readers, so it costs nothing there and is ~10x faster), and plain
Python's, used otherwise: a quick rescan re-judges the statistics an earlier deep scan recorded,
and the quick path loads neither numpy nor torch (plain Python: ~1 s per 100,000 files).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable
from typing import Any, NamedTuple

_MAD_FLOOR = 0.01  # the spread never taken below this (log units, std units): identical files
_STD_FLOOR = 1e-12  # a blank image's std is 0: its log is taken at this


class Scores(NamedTuple):
    """Per file: ``scale`` (log factor its channels share), ``shift`` (common mean offset in the
    peers' std) and their robust z; per channel (one list per channel, over the files): what the
    channel does beyond its file's scale and shift, and robust z; ``channel_max``: per file, the
    largest channel |z|."""

    scale: list[float]
    shift: list[float]
    own_log: list[list[float]]
    own_mean: list[list[float]]
    z_scale: list[float]
    z_shift: list[float]
    z_log: list[list[float]]
    z_mean: list[list[float]]
    channel_max: list[float]


def peer_scores(raw: bytes, n: int, channels: int, *, use_numpy: bool | None = None) -> Scores:
    """The scores of ``n`` files of ``channels`` channels. A NaN or Inf (a tampered state row)
    counts as 0 and cannot blind the medians."""
    if use_numpy is None:
        use_numpy = "numpy" in sys.modules
    return _with_numpy(raw, n, channels) if use_numpy else _in_python(raw, n, channels)


def _with_numpy(raw: bytes, n: int, channels: int) -> Scores:
    import numpy as np

    values = np.frombuffer(raw, dtype="<f4").reshape(n, 2, channels).astype(np.float64)
    values[~np.isfinite(values)] = 0.0
    means = values[:, 0, :]
    stds = np.maximum(values[:, 1, :], _STD_FLOOR)
    # math.log, not np.log: numpy's SIMD log is off by an ulp on some values, and the two paths
    # must give the same numbers to the bit (``_in_python`` takes the floor's log below it, too)
    logs = np.array(list(map(math.log, stds.ravel().tolist()))).reshape(stds.shape)
    unit = math.exp(float(_middle(np, logs.ravel(), 0)))  # the peers' typical std: the unit of mean offsets
    log_dev = logs - _middle(np, logs, 0)
    mean_dev = (means - _middle(np, means, 0)) / unit
    scale = _middle(np, log_dev, 1)
    shift = _middle(np, mean_dev, 1)
    own_log = log_dev - scale[:, None]
    own_mean = mean_dev - shift[:, None]
    z_log, z_mean = _z_numpy(np, own_log), _z_numpy(np, own_mean)
    channel_max = np.maximum(np.abs(z_log).max(axis=1), np.abs(z_mean).max(axis=1))
    return Scores(
        scale.tolist(),
        shift.tolist(),
        own_log.T.tolist(),
        own_mean.T.tolist(),
        _z_numpy(np, scale).tolist(),
        _z_numpy(np, shift).tolist(),
        z_log.T.tolist(),
        z_mean.T.tolist(),
        channel_max.tolist(),
    )


def _z_numpy(np: Any, x: Any) -> Any:
    centre = _middle(np, x, 0)
    mad = 1.4826 * _middle(np, np.abs(x - centre), 0)
    return (x - centre) / np.maximum(mad, _MAD_FLOOR)


def _middle(np: Any, x: Any, axis: int) -> Any:
    """The median along ``axis`` as :func:`_median` takes it (the middle value, or the mean of
    the two middle ones), from ``np.partition``: ``np.median`` gives the same, but imports
    ``numpy.ma`` on its first call (tens of milliseconds) and checks for NaN, which never get here."""
    size = x.shape[axis]
    mid = size // 2
    if size % 2:
        return np.take(np.partition(x, mid, axis=axis), mid, axis=axis)
    part = np.partition(x, (mid - 1, mid), axis=axis)
    return (np.take(part, mid - 1, axis=axis) + np.take(part, mid, axis=axis)) / 2


def _in_python(raw: bytes, n: int, channels: int) -> Scores:
    values = array("f")
    values.frombytes(raw)
    if sys.byteorder == "big":
        values.byteswap()  # recorded little-endian
    width = 2 * channels
    means = [_finite(values[c::width]) for c in range(channels)]  # columns: a strided slice each
    floor = math.log(_STD_FLOOR)
    logs = [
        [math.log(x) if x > _STD_FLOOR else floor for x in _finite(values[channels + c :: width])]
        for c in range(channels)
    ]
    unit = math.exp(_median([x for col in logs for x in col]))
    log_dev = [_minus(col, _median(col)) for col in logs]
    mean_dev = [[(x - mid) / unit for x in col] for col, mid in ((col, _median(col)) for col in means)]
    scale = [_median(row) for row in zip(*log_dev, strict=True)]
    shift = [_median(row) for row in zip(*mean_dev, strict=True)]
    own_log = [[x - f for x, f in zip(col, scale, strict=True)] for col in log_dev]
    own_mean = [[x - f for x, f in zip(col, shift, strict=True)] for col in mean_dev]
    z_log = [_robust_z(col) for col in own_log]
    z_mean = [_robust_z(col) for col in own_mean]
    channel_max = [max(map(abs, row)) for row in zip(*z_log, *z_mean, strict=True)]
    return Scores(scale, shift, own_log, own_mean, _robust_z(scale), _robust_z(shift), z_log, z_mean, channel_max)


def _finite(column: array) -> list[float]:
    values = column.tolist()
    if all(map(math.isfinite, values)):
        return values
    return [x if math.isfinite(x) else 0.0 for x in values]


def _minus(xs: list[float], mid: float) -> list[float]:
    return [x - mid for x in xs]


def _median(xs: Iterable[float]) -> float:
    ordered = sorted(xs)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _robust_z(xs: list[float]) -> list[float]:
    """``(x - median) / (1.4826 * MAD)`` over the files, the MAD floored (identical files)."""
    centre = _median(xs)
    mad = 1.4826 * _median([abs(x - centre) for x in xs])
    spread = max(mad, _MAD_FLOOR)
    return [(x - centre) / spread for x in xs]
