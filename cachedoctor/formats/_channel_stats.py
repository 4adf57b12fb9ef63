"""Deep mode: each latent's per-channel mean and standard deviation, for ``distribution-outlier``.

A latent encoded with another VAE or another scaling (a missing ``x scaling_factor``, SD1.5's
factor in an SDXL cache, a Flux shift not applied) or from a blank image has the right shape,
dtype and CRC; only its values say so, and only next to its peers'. The deep pass
(``_tensor_values.tensor_values``) computes them after the NaN/Inf check of the same bytes,
for finite tensors only (a file with NaN is ``non-finite`` already).

Cost: a deep scan is memory-bound and must stay so (docs/performance.md). A grid of every
step-th row and column is sampled, evenly spread, so that each channel has at least
:data:`_SAMPLE` values (a 128x128 SDXL latent: every 8th row and column, 16x16): the spread of
the mean and standard deviation over a few hundred values is far below the spread between
images, and the same grid is taken whatever the dtype, so a cache's files are measured alike.
Sums run in float32 (the values and their squares in one block, one matrix-vector product);
fp8 is gathered from a table of every value, fp16 cast by numpy (in hardware where the CPU
has it), bf16 is its bits shifted into float32.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable, Sequence
from functools import lru_cache
from math import sqrt
from typing import Any, NamedTuple

from cachedoctor.formats._deep import contiguous_strides, lazy_numpy

_SAMPLE = 256  # elements per channel, at least: a grid of every step-th row and column
_MAX_CHANNELS = 128  # LTX-Video's VAE has 128; text embeddings are wider and are never [C,H,W]
_NOT_LATENT = ("embed", "prompt", "text", "mask", "hidden", "pooled", "time_ids", "token")

#: dtype -> the numpy dtype its bits are read as
_WORD = {
    "float32": "<f4",
    "float64": "<f8",
    "float16": "<u2",
    "bfloat16": "<u2",
    "float8_e4m3fn": "u1",
    "float8_e5m2": "u1",
    "float8_e4m3fnuz": "u1",
    "float8_e5m2fnuz": "u1",
}
#: fp8 layouts: (exponent bits, mantissa bits, bias)
_FP8 = {
    "float8_e4m3fn": (4, 3, 7),
    "float8_e5m2": (5, 2, 15),
    "float8_e4m3fnuz": (4, 3, 8),
    "float8_e5m2fnuz": (5, 2, 16),
}


def latent_dims(key: str, shape: Sequence[int]) -> tuple[int, int, int] | None:
    """``(channels, rows, width)`` of a latent-like tensor, or ``None``.

    Latents are ``[C,H,W]``, ``[1,C,H,W]`` or video ``[C,F,H,W]`` (rows: ``F*H``) with
    2..128 channels and both spatial sizes above 1. Text embeddings (``[L,D]``, ``[1,L,D]``)
    and masks are not latents, and keys that name them are skipped whatever their shape.
    """
    dims = tuple(shape)
    if len(dims) == 4 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) == 3:
        channels, rows, width = dims
        height = rows
    elif len(dims) == 4:
        channels, frames, height, width = dims
        rows = frames * height
    else:
        return None
    if not (2 <= channels <= _MAX_CHANNELS and height > 1 and width > 1):
        return None
    lowered = key.lower()
    if any(word in lowered for word in _NOT_LATENT):
        return None
    return channels, rows, width


def channel_stats(
    key: str,
    buffer: memoryview,
    dtype: str,
    offset: int,
    shape: Sequence[int],
    stride: Sequence[int] | None,
    *,
    bounded: bool = False,
) -> bytes | None:
    """Per-channel mean then standard deviation, ``2*C`` little-endian float32, of a latent-like
    tensor whose storage starts at ``buffer`` (``offset`` in elements); ``None`` for other
    tensors, dtypes without a cheap decoding, and non-contiguous views. ``bounded``: every
    value is known to lie within +-2^56, so no square or sum can overflow float32."""
    if dtype not in _WORD:
        return None
    grid = _grid(key, dtype, tuple(shape), None if stride is None else tuple(stride))
    if grid is None or (offset + grid.elements) * grid.itemsize > len(buffer):
        return None
    return grid_stats(lazy_numpy(), grid, buffer, offset * grid.itemsize, dtype, bounded)


def grid_stats(np: Any, grid: _Grid, buffer: memoryview, start: int, dtype: str, bounded: bool) -> bytes:
    """:func:`channel_stats` of a tensor whose grid is known and fits: its first value at byte
    ``start`` of ``buffer`` (the deep pass's planned path calls this directly, ``_tensor_values``)."""
    # the sampled grid, a strided view of the buffer (numpy checks that it fits)
    part = np.ndarray(grid.shape, grid.word, buffer, start, grid.strides)
    bf16 = dtype == "bfloat16"
    block, rows_in, high, values, squares, ones = _scratch(*grid.shape, bf16 and _LITTLE)
    # (assignment rather than np.copyto, whose Python wrapper costs more than these small copies)
    if bf16 and high is not None:  # its bits are a float32's upper half, the lower half zero
        high[...] = part
    elif bf16:
        np.left_shift(part, 16, out=rows_in.view(np.uint32), dtype=np.uint32)
    elif dtype in _FP8:
        np.take(_table(dtype), part, out=rows_in, mode=_TAKE)
    elif dtype == "float64":  # values beyond float32's range cast to +-inf (an outlier), without a warning
        with np.errstate(over="ignore"):
            rows_in[...] = part
    else:  # fp16 read as such: numpy's (hardware) cast of the strided grid, ~2 us (a table gather ~3.5)
        rows_in[...] = part
    if dtype in _SMALL or (bounded and grid.n <= _MAX_N) or _bounded(np, values, grid.n):
        # no square or sum can overflow: no np.errstate needed, and no sum to check
        np.multiply(values, values, out=squares)
        return _packed_finite((block @ ones).tolist(), grid.channels, grid.n)  # one matrix-vector product
    with np.errstate(over="ignore", invalid="ignore"):  # finite values near float32's limit square to inf
        np.multiply(values, values, out=squares)
        sums = (block @ ones).tolist()  # C sums, then C sums of squares
    return _packed(sums, grid.channels, grid.n)


def _bounded(np: Any, values: Any, n: int) -> bool:
    """Whether no square of ``values`` and no sum of ``n`` of them can overflow float32: within
    +-2^56 a square is below 2^112, and 2^15 of them sum below float32's 2^128. Two read-only
    passes over the sample cost less than an ``np.errstate`` (a few microseconds a call)."""
    return n <= _MAX_N and np.minimum.reduce(values, None) > -_SAFE and np.maximum.reduce(values, None) < _SAFE


def _packed_finite(sums: list[float], channels: int, n: int) -> bytes:
    """:func:`_packed` of sums that cannot have overflowed: the same numbers, fewer steps."""
    means = [total / n for total in sums[:channels]]
    # ``max(v, 0.0)`` without the call: v itself unless below 0 (so -0.0 stays -0.0, as max keeps it)
    stds = [sqrt(0.0 if (v := q / n - m * m) < 0.0 else v) for q, m in zip(sums[channels:], means, strict=False)]
    return _packer(channels)(*means, *stds)


@lru_cache(maxsize=_MAX_CHANNELS)
def _packer(channels: int) -> Callable[..., bytes]:
    return struct.Struct(f"<{2 * channels}f").pack


def _packed(sums: list[float], channels: int, n: int) -> bytes:
    """The means then the standard deviations, from the C sums then the C sums of squares."""
    if math.isfinite(sum(sums)):  # the usual case: no sum overflowed (a double cannot, summing these)
        return _packed_finite(sums, channels, n)
    means = [_finite(total / n) for total in sums[:channels]]
    stds = [_finite(math.sqrt(max(q / n - m * m, 0.0))) for q, m in zip(sums[channels:], means, strict=True)]
    return _packer(channels)(*means, *stds)


def _finite(value: float) -> float:
    """An overflowed sum as the largest float32 (a file of such values is an outlier, not a
    NaN that would blind its peers' medians)."""
    if math.isfinite(value):
        return value
    return -_F32_MAX if value < 0 else _F32_MAX


_F32_MAX = 3.4028234663852886e38


class _Grid(NamedTuple):
    """Where the sample of one tensor layout lies: the files of a bucket share it, so it is
    worked out once."""

    word: str  # the numpy dtype the bits are read as
    itemsize: int
    elements: int  # of the tensor
    shape: tuple[int, int, int]  # the grid: channels, rows taken, columns taken
    strides: tuple[int, int, int]  # its byte strides in the buffer
    channels: int
    n: int  # values per channel


@lru_cache(maxsize=1024)
def _grid(key: str, dtype: str, shape: tuple[int, ...], stride: tuple[int, ...] | None) -> _Grid | None:
    """The sampled grid (every step-th row and column) of a contiguous latent-like tensor."""
    dims = latent_dims(key, shape)
    if dims is None or (stride is not None and stride != contiguous_strides(shape)):
        return None
    channels, rows, width = dims
    step = max(1, math.isqrt(rows * width // _SAMPLE))
    taken, across = -(-rows // step), -(-width // step)
    word = _WORD[dtype]
    size = _ITEMSIZE[word]
    word = "<f2" if dtype == "float16" else word  # the grid is read as fp16 values, cast to float32
    strides = (rows * width * size, step * width * size, step * size)
    return _Grid(word, size, channels * rows * width, (channels, taken, across), strides, channels, taken * across)


_ITEMSIZE = {"<f8": 8, "<f4": 4, "<u2": 2, "u1": 1}
#: fp8 values are gathered from their 256-entry table by their bits with ``mode="clip"``: a byte
#: never indexes out of it, and numpy's default ``mode="raise"`` copies ``out`` to a buffer and
#: back on every call (to leave it untouched on an error), which cost more than the gather
_TAKE = "clip"
_SMALL = frozenset({"float16", *_FP8})  # largest finite values: 65504 (fp16), 57344 (e5m2)
_LITTLE = sys.byteorder == "little"
_SAFE = float(2**56)  # see _bounded
_MAX_N = 1 << 15


@lru_cache(maxsize=64)
def _scratch(channels: int, rows: int, width: int, bf16: bool) -> tuple[Any, Any, Any, Any, Any, Any]:
    """A reused float32 block ``[2C, rows*width]``: the sampled values (also seen as
    ``[C, rows, width]``, where they are copied to) over their squares; and a ones vector. With
    ``bf16``, a block of its own whose values' lower 16 bits stay zero, and the view of their
    upper halves (little-endian) that bf16 bits are copied into: a float32 is its bf16 bits
    shifted up by 16, without numpy casting each one to uint32 and shifting it."""
    np = lazy_numpy()
    block = np.zeros((2 * channels, rows * width), dtype=np.float32)
    values, squares = block[:channels], block[channels:]
    ones = np.ones(rows * width, dtype=np.float32)
    rows_in = values.reshape(channels, rows, width)
    high = values.view(np.uint16).reshape(channels, rows, width, 2)[..., 1] if bf16 else None
    return block, rows_in, high, values, squares, ones


@lru_cache(maxsize=8)
def _table(dtype: str) -> Any:
    """Every value of an 8-bit float format by its bits, as float32 (numpy has no fp8 dtype).
    NaN patterns decode to whatever they decode to: a tensor with NaN never gets here."""
    import numpy as np

    exp_bits, man_bits, bias = _FP8[dtype]
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent = (bits >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = (bits & ((1 << man_bits) - 1)) / float(1 << man_bits)
    normal = (1.0 + mantissa) * np.exp2(exponent - bias)
    subnormal = mantissa * np.exp2(1 - bias)
    return (sign * np.where(exponent == 0, subnormal, normal)).astype(np.float32)


def decode_stats(stats: bytes) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(means, stds)`` of :func:`channel_stats`' bytes (pure Python: for tests and reports)."""
    from array import array

    values = array("f")
    values.frombytes(stats)
    half = len(values) // 2
    return tuple(values[:half]), tuple(values[half:])
