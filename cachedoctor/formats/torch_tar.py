"""torch.save's pre-0.4 tar format: members ``storages``, ``tensors`` and ``pickle``.

torch.load still tries this format first on every non-zip file (``tarfile.open``), and with
``weights_only=False`` unpickles each member's pickles: ``storages`` holds a count, then per
storage a ``(key, location, storage type)`` pickle and its raw bytes, then a storage-views
pickle; ``tensors`` a count, then per tensor an args pickle and its sizes and strides;
``pickle`` the object. Every pickle is walked statically, member by member, following that
layout exactly. The members are found with Python's own ``tarfile``, as torch finds them.
A benign file is reported as ``legacy-tar`` (``weights_only=True`` refuses the format).
"""

from __future__ import annotations

import io
import struct
import tarfile
from typing import TYPE_CHECKING

from cachedoctor.formats._dtypes import ITEMSIZE
from cachedoctor.formats._pickle_scan import LIMITS
from cachedoctor.formats._source import Source
from cachedoctor.formats._unpickle import RestrictedUnpickler, StorageType
from cachedoctor.formats._verdict import LOADERS, bomb, merge, screen
from cachedoctor.formats.interface import FileMeta, FormatReader, ReadError
from cachedoctor.lifetime import reraise_interrupt

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_MEMBERS = ("storages", "tensors", "pickle")
_MAX_ENTRIES = 10_000
_MEMBER_LIMIT = LIMITS.pickle_bytes * 4


class _SourceFile(io.RawIOBase):
    """A read-only file object over a :class:`Source`, for ``tarfile``."""

    def __init__(self, src: Source) -> None:
        self.src, self.pos = src, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.src.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        with memoryview(buffer) as view:  # released on return: RawIOBase.read then resizes its bytearray
            data = self.src.read_at(self.pos, min(len(view), max(self.src.size - self.pos, 0)))
            view[: len(data)] = data
        self.pos += len(data)
        return len(data)


class TorchTarReader(FormatReader):
    name = "torch-tar"

    def claims(self, head: bytes, src: Source) -> bool:
        try:
            tarfile.TarInfo.frombuf(src.read_at(0, 512), tarfile.ENCODING, "surrogateescape")
        except (tarfile.HeaderError, ValueError):
            return False
        return True

    def read(self, path: str, src: Source, *, deep: bool) -> FileMeta:
        unsafe: list[str] = []
        seen = 0
        try:
            with tarfile.open(fileobj=_SourceFile(src), mode="r:") as tar:
                for info in tar:
                    seen += 1
                    if seen > _MAX_ENTRIES:
                        raise bomb("tar archive", f"more than {_MAX_ENTRIES:,} entries")
                    if info.name not in _MEMBERS or not (info.isfile() or info.issym() or info.islnk()):
                        continue
                    try:  # tar.extract follows a link to the member it names, and so does this
                        handle = tar.extractfile(info)
                    except KeyError:
                        merge(
                            unsafe,
                            [
                                f"a {info.name} link to {info.linkname[:80]!r}, outside the archive, "
                                "which torch.load would unpickle"
                            ],
                        )
                        continue
                    data = handle.read(_MEMBER_LIMIT + 1) if handle is not None else b""
                    if len(data) > _MEMBER_LIMIT:
                        raise bomb(info.name, f"a member of more than {_MEMBER_LIMIT:,} bytes")
                    merge(unsafe, _screen_member(info.name, data))
        except tarfile.TarError as exc:
            if not unsafe:
                raise ReadError("unknown-format", f"not a readable tar archive ({exc})") from None
        if unsafe:
            return FileMeta(path, self.name, src.size, foreign_globals=tuple(unsafe), loaders=LOADERS[self.name])
        if not seen:
            raise ReadError("unknown-format", "an empty tar archive")
        raise ReadError(
            "legacy-tar",
            "torch's pre-0.4 tar format (or another tar archive): "
            "torch.load(weights_only=True) refuses it; save it again with a current torch",
        )


def _screen_member(name: str, data: bytes) -> list[str]:
    """Unsafe globals in one member's pickles, following torch's legacy tar layout."""
    unsafe: list[str] = []
    pos = 0

    def next_pickle(what: str, value: bool = False) -> object:
        nonlocal pos
        result = screen(f"{name}: {what}", data, pos)
        merge(unsafe, result.unsafe)
        if not result.complete:
            raise _Stop
        start, pos = pos, result.end
        if not value or result.unsafe:
            return None
        try:
            return RestrictedUnpickler(data[start:pos]).load()
        except Exception as exc:  # a damaged pickle ends the member, as it ends torch's load
            reraise_interrupt(exc)
            raise _Stop from None

    try:
        if name == "pickle":
            next_pickle("object")
        elif name == "storages":
            count = next_pickle("storage count", value=True)
            for _ in range(_count(count)):
                args = next_pickle("storage", value=True)
                itemsize = _itemsize(args)
                (numel,) = struct.unpack_from("<q", data, pos)
                if numel < 0:
                    raise _Stop
                pos += 8 + numel * itemsize
            next_pickle("storage views")
        else:
            count = next_pickle("tensor count", value=True)
            for _ in range(_count(count)):
                next_pickle("tensor")
                (ndim,) = struct.unpack_from("<i", data, pos)
                if ndim < 0 or ndim > 64:
                    raise _Stop
                pos += 8 + 16 * ndim + 8
    except (_Stop, struct.error):
        pass
    return unsafe


class _Stop(Exception):
    """The member's layout ends here, as torch's reading of it would."""


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise _Stop
    return min(value, _MAX_ENTRIES)


def _itemsize(args: object) -> int:
    if not isinstance(args, tuple) or len(args) != 3 or not isinstance(args[2], StorageType):
        raise _Stop
    dtype = args[2].dtype
    return ITEMSIZE.get(dtype, 1) if dtype else 1
