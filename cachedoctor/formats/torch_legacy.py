"""Legacy (pre-1.6, non-zip) torch.save files, still found in old caches.

Layout: four pickles (magic number, protocol version, system info, the object with storage
ids as persistent ids), a pickled list of storage keys, then for each key an int64 element
count and the raw bytes. torch.load(weights_only=False) unpickles all five in that order, so
each is walked statically for globals (a payload can hide in the magic-number pickle, pushed and
popped before its STOP) before the restricted unpickler reads the structure.
"""

from __future__ import annotations

import io
import struct
from dataclasses import replace

from cachedoctor.formats import _deep
from cachedoctor.formats._dtypes import ITEMSIZE
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import BufferSource, Source, growing_window
from cachedoctor.formats._tensor_values import tensor_values
from cachedoctor.formats._unpickle import PickleBomb, RestrictedUnpickler, StorageRef, legacy_storage_ref, walk
from cachedoctor.formats._verdict import LOADERS, bomb, screen_sequence
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError
from cachedoctor.lifetime import reraise_interrupt

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
_MAGIC_BYTES = MAGIC_NUMBER.to_bytes(10, "little")
_MAGIC_TEXT = str(MAGIC_NUMBER).encode()  # protocol 0 and 1 spell it as a text LONG
_PICKLES = 5


class TorchLegacyReader(FormatReader):
    name = "torch-legacy"

    def claims(self, head: bytes, src: Source) -> bool:
        return (head[:1] == b"\x80" and _MAGIC_BYTES in head[:32]) or _MAGIC_TEXT in head[:40]

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        # The pickles come first; read them from an in-memory window bounded by the pickle limit.
        window, found = growing_window(
            src,
            LIMITS.pickle_bytes * _PICKLES,
            lambda data: screen_sequence(data, _PICKLES, "legacy torch file"),
            lambda result: result.truncated,
        )
        unsafe, ends, stopped = found.unsafe, found.ends, found.stopped
        loaders = LOADERS[self.name]
        if stopped is not None:
            if unsafe:
                return FileMeta(
                    path, self.name, src.size, foreign_globals=tuple(unsafe), loaders=loaders, unreadable_reason=stopped
                )
            raise ReadError("bad-pickle", f"legacy torch pickle does not load ({stopped})")
        try:
            meta = self._structure(path, src, window, ends, deep)
        except ReadError as exc:
            if exc.problem == "resource-bomb" or not unsafe:
                raise
            return FileMeta(
                path, self.name, src.size, foreign_globals=tuple(unsafe), loaders=loaders, unreadable_reason=exc.message
            )
        if unsafe:
            meta = replace(meta, foreign_globals=tuple(unsafe), loaders=loaders)
        return meta

    def _structure(self, path: str, src: Source, window: bytes, ends: list[int], deep: bool) -> FileMeta:
        stream = io.BytesIO(window)
        refs: dict[str, StorageRef] = {}

        def persistent(pid: object) -> object:
            ref = legacy_storage_ref(pid)
            if isinstance(ref, StorageRef):
                refs.setdefault(ref.key, ref)
            return ref

        try:
            header = [RestrictedUnpickler(stream).load() for _ in range(3)]
            if header[0] != MAGIC_NUMBER:
                raise ReadError("bad-pickle", "legacy torch file with a wrong magic number")
            walked = walk(RestrictedUnpickler(stream, persistent).load())
            keys = RestrictedUnpickler(stream).load()
        except ReadError:
            raise
        except PickleBomb as exc:
            raise bomb("legacy torch file", str(exc)) from None
        except MemoryError:
            raise  # the reader's memory cap: the scan's verdict on it (scan/_memcap.py), not damage
        except Exception as exc:  # hostile or damaged pickles raise anything
            reraise_interrupt(exc)
            raise ReadError(
                "bad-pickle", f"legacy torch pickle does not load ({type(exc).__name__}: {str(exc)[:120]})"
            ) from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ReadError("bad-pickle", "legacy torch file without its storage key list")

        pos = ends[-1]
        records: dict[str, tuple[int, int]] = {}  # key -> (data start, bytes)
        for key in keys:
            ref = refs.get(key)
            if ref is None:
                raise ReadError("bad-pickle", f"storage {key} is listed but no tensor uses it")
            (count,) = struct.unpack("<q", src.exact(pos, 8))
            nbytes = count * (ITEMSIZE.get(ref.dtype, 1) if ref.dtype else 1)
            if count < 0 or pos + 8 + nbytes > src.size:
                raise ReadError("truncated", f"storage {key} runs past the end of the file")
            records[key] = (pos + 8, nbytes)
            pos += 8 + nbytes
        if pos != src.size:
            raise ReadError("bad-pickle", f"{src.size - pos} unexpected bytes after the last storage")

        tensors = []
        missing = []
        for key, rec in walked.tensors:
            record = records.get(rec.storage.key)
            if record is None and rec.storage.key not in missing:
                missing.append(rec.storage.key)
            nonfinite = stats = None
            if deep and isinstance(src, BufferSource) and record is not None:
                data = src.view(*record)
                nonfinite, stats = tensor_values(
                    key, data, rec.dtype, rec.storage_elements, rec.offset, rec.size, rec.stride
                )
            tensors.append(rec.meta(key, None if record is None else record[1], nonfinite, stats))
        digest = _deep.file_digest(src) if deep and isinstance(src, BufferSource) else None
        return FileMeta(
            path,
            self.name,
            src.size,
            container=walked.container,
            tensors=tuple(tensors),
            missing_records=tuple(missing),
            deep=deep,
            digest=digest,
        )
