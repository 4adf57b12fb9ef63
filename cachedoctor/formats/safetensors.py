"""safetensors files: an 8-byte header length, a JSON header, then the tensors back to back.

The format has no checksum, so the header is validated strictly (formats.md): a sane length,
known dtypes, ``end - start == numel * itemsize``, offsets contiguous from 0, and the last
tensor ending exactly at the end of the file. Quick mode reads only the header.
"""

from __future__ import annotations

import json
import struct

from cachedoctor.formats import _deep
from cachedoctor.formats._dtypes import ITEMSIZE, SAFETENSORS_DTYPE
from cachedoctor.formats._source import BufferSource, Source
from cachedoctor.formats._tensor_values import tensor_values
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError, TensorMeta

_MAX_HEADER = 100_000_000


def _header_length(head: bytes) -> int | None:
    if len(head) < 9:
        return None
    (n,) = struct.unpack_from("<Q", head, 0)
    return n


class SafetensorsReader(FormatReader):
    name = "safetensors"

    def claims(self, head: bytes, src: Source) -> bool:
        n = _header_length(head)
        return n is not None and 2 <= n < _MAX_HEADER and head[8:9] == b"{"

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        n = _header_length(src.read_at(0, 9))
        if n is None or n >= _MAX_HEADER:
            raise ReadError("bad-header", "safetensors header length is implausible")
        if 8 + n > src.size:
            raise ReadError(
                "truncated", f"safetensors header claims {n} bytes but the file has {src.size - 8} after it"
            )
        try:
            header = json.loads(src.exact(8, n))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ReadError("bad-header", f"safetensors header is not JSON ({type(exc).__name__})") from None
        if not isinstance(header, dict):
            raise ReadError("bad-header", "safetensors header is not a JSON object")
        metadata = header.pop("__metadata__", None)
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            raise ReadError("bad-header", "safetensors __metadata__ is not a string-to-string map")
        entries = [_entry(key, value) for key, value in header.items()]
        entries.sort(key=lambda e: e[1])
        expected_start = 0
        for tensor, start, end in entries:
            if start != expected_start:
                raise ReadError(
                    "bad-header",
                    f"tensor {tensor.key} starts at {start}, not at {expected_start}: offsets are not contiguous",
                )
            expected_start = end
        data_end = 8 + n + expected_start
        if data_end > src.size:
            raise ReadError("truncated", f"tensors end at byte {data_end} but the file has {src.size}")
        if data_end < src.size:
            raise ReadError("bad-header", f"{src.size - data_end} bytes after the last tensor")
        tensors = [t for t, _, _ in entries]
        digest = None
        if deep and isinstance(src, BufferSource):
            tensors = [_with_nonfinite(t, src.view(8 + n + start, end - start)) for t, start, end in entries]
            digest = _deep.file_digest(src)
        return FileMeta(
            path,
            self.name,
            src.size,
            container="dict",
            tensors=tuple(tensors),
            deep=deep,
            digest=digest,
            metadata=tuple(metadata.items()) if metadata else (),
        )


def _entry(key: str, value: object) -> tuple[TensorMeta, int, int]:
    if not isinstance(value, dict):
        raise ReadError("bad-header", f"safetensors entry {key!r:.60} is not an object")
    raw = value.get("dtype")
    dtype = SAFETENSORS_DTYPE.get(raw) if isinstance(raw, str) else None  # a list would raise TypeError
    shape, offsets = value.get("shape"), value.get("data_offsets")
    if dtype is None:
        raise ReadError("bad-header", f"tensor {key!r:.60} has unknown dtype {value.get('dtype')!r:.20}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise ReadError("bad-header", f"tensor {key!r:.60} has a malformed shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)):
        raise ReadError("bad-header", f"tensor {key!r:.60} has malformed data_offsets")
    start, end = offsets
    itemsize = ITEMSIZE[dtype]
    numel = 1
    for s in shape:
        numel *= s
    if end - start != numel * itemsize:
        raise ReadError(
            "bad-header", f"tensor {key!r:.60} spans {end - start} bytes but its shape needs {numel * itemsize}"
        )
    return _tensor(key, tuple(shape), dtype, itemsize, numel, end - start), start, end


def _tensor(
    key: str,
    shape: tuple[int, ...],
    dtype: str,
    itemsize: int,
    numel: int,
    nbytes: int,
    nonfinite: int | None = None,
    stats: bytes | None = None,
) -> TensorMeta:
    return TensorMeta(
        key=key,
        shape=shape,
        dtype=dtype,
        itemsize=itemsize,
        storage=key,
        storage_numel=numel,
        record_bytes=nbytes,
        nonfinite=nonfinite,
        stats=stats,
    )


def _with_nonfinite(t: TensorMeta, data: memoryview) -> TensorMeta:
    """``t`` with its NaN/Inf count and, for a finite latent, its per-channel statistics (built
    anew: ``dataclasses.replace`` costs several microseconds a tensor)."""
    numel = t.storage_numel or 0
    count, stats = tensor_values(t.key, data, t.dtype, numel, 0, t.shape, None)
    if count is None:
        return t
    return _tensor(t.key, t.shape, t.dtype, t.itemsize, numel, t.record_bytes or 0, count, stats)
