"""Deep-mode data checks: CRC-32 of zip members, NaN/Inf counts, and the file digest.

These read tensor bytes, so they run only under ``--deep``. numpy is imported here and only
here (lazily), never torch: bfloat16 and float8 are tested on their bit patterns.
"""

from __future__ import annotations

from collections.abc import Sequence

try:  # ISA-L's CRC-32 is the same polynomial as zlib's, about six times faster (SIMD)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal has wheels for the common platforms
    from zlib import crc32

from cachedoctor.formats._dtypes import NONFINITE_RULE
from cachedoctor.formats._source import BufferSource
from cachedoctor.formats._zip import STORED, ZipDirectory, data_offset, decompress, local_name_differs
from cachedoctor.formats.interface import MemberCrc, ReadError

_COMPLEX = {"complex128": "<c16", "complex64": "<c8"}


def digest(buffer: memoryview) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(buffer)


def member_starts(src: BufferSource, directory: ZipDirectory) -> dict[str, int]:
    """Byte offset where each member's data starts (read from its local header)."""
    starts = {}
    for name, member in directory.members.items():
        starts[name] = data_offset(src.view(member.header_offset, 30), member)
    return starts


def renamed_members(src: BufferSource, directory: ZipDirectory) -> list[str]:
    """Members whose local header carries another name than the central directory's."""
    renamed = []
    for member in directory.entries:
        nlen = len(member.name.encode("utf-8", "replace"))
        end = min(src.size, member.header_offset + 30 + nlen * 4 + 4)
        if local_name_differs(src.buffer[member.header_offset : end], member):
            renamed.append(member.name)
    return renamed


def crc_mismatches(src: BufferSource, directory: ZipDirectory, starts: dict[str, int]) -> tuple[MemberCrc, ...]:
    """Members whose bytes do not hash to the CRC-32 the central directory records."""
    bad = []
    for name, member in directory.members.items():
        raw = src.view(starts[name], member.compressed_size)
        if member.method == STORED:
            actual = crc32(raw)
        else:
            try:
                actual = crc32(decompress(raw, member))
            except ReadError:
                actual = -1
        if actual != member.crc:
            bad.append(MemberCrc(name, member.crc, actual))
    return tuple(bad)


def count_nonfinite(
    buffer: memoryview, dtype: str, numel: int, offset: int, shape: Sequence[int], stride: Sequence[int] | None
) -> int | None:
    """NaN/Inf elements in the view (``offset``/``shape``/``stride``) of a storage of ``numel``.

    ``buffer`` starts at the storage's first byte. Returns ``None`` for non-floating dtypes
    and for views that do not fit their storage (reported as corruption elsewhere).
    """
    rule = NONFINITE_RULE.get(dtype)
    if rule is None:
        return None
    import numpy as np

    if isinstance(rule, str):
        np_dtype, mask, value = np.dtype(_COMPLEX.get(dtype, rule)), None, None
        if dtype == "complex32":
            return None
    else:
        np_dtype, mask, value = np.dtype(rule[0]), rule[1], rule[2]
    if numel * np_dtype.itemsize > len(buffer):
        return None
    if stride is None:
        stride = _contiguous(shape)
    if any(s == 0 for s in shape):
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=False))
    if offset + span > numel:
        return None
    storage = np.frombuffer(buffer, dtype=np_dtype, count=numel)
    if list(stride) == _contiguous(shape):
        view = storage[offset : offset + span]
    else:
        view = np.lib.stride_tricks.as_strided(
            storage[offset:], shape=tuple(shape), strides=tuple(s * np_dtype.itemsize for s in stride), writeable=False
        )
    if mask is None:
        if view.dtype.kind == "f" and np.isfinite(view.min()) and np.isfinite(view.max()):
            return 0  # min/max propagate NaN and reach Inf: a fast screen before counting
        return int(view.size - np.count_nonzero(np.isfinite(view)))
    return int(np.count_nonzero((view & mask) == value))


def _contiguous(shape: Sequence[int]) -> list[int]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return list(reversed(stride))
