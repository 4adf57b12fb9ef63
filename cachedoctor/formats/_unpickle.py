"""A restricted unpickler that learns what a torch pickle describes without running it.

``find_class`` resolves only an allow-list of names, and resolves them to small stand-ins
defined here (never to torch itself), so nothing from the file is imported or called: a tensor
becomes a :class:`TensorRecord` of its storage id, offset, size and stride. Any other global is
recorded by name and replaced by an inert :class:`Opaque` object, so a malicious ``__reduce__``
(``os.system``...) is reported, never executed. torch is not imported.
"""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable

from cachedoctor.formats._dtypes import ITEMSIZE, STORAGE_DTYPE, TORCH_ALIASES

_MAX_TENSORS = 100_000
_MAX_NODES = 2_000_000


class Opaque:
    """Stands in for a global outside the allow-list and everything built from it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> "Opaque":
        return Opaque(self.name)

    def __setstate__(self, state: Any) -> None:  # BUILD on an opaque object does nothing
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"<opaque {self.name}>"


@dataclass(frozen=True, slots=True)
class StorageType:
    """``torch.FloatStorage`` and friends; ``dtype`` is ``None`` for ``UntypedStorage``."""

    name: str
    dtype: str | None


@dataclass(frozen=True, slots=True)
class DType:
    name: str


@dataclass(frozen=True, slots=True)
class StorageRef:
    key: str
    dtype: str | None
    location: str
    numel: int  # elements of ``dtype``; bytes for untyped storages


@dataclass(frozen=True, slots=True)
class TensorRecord:
    storage: StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(type(v) is int and v >= 0 for v in value):
        raise pickle.UnpicklingError(f"tensor {what} is not a tuple of non-negative ints: {value!r}")
    return tuple(value)


def _rebuild(storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None) -> TensorRecord:
    if not isinstance(storage, StorageRef):
        raise pickle.UnpicklingError("tensor without a storage record")
    if type(offset) is not int or offset < 0:
        raise pickle.UnpicklingError(f"tensor storage offset is not a non-negative int: {offset!r}")
    size_t, stride_t = _ints(size, "size"), _ints(stride, "stride")
    if len(size_t) != len(stride_t):
        raise pickle.UnpicklingError("tensor size and stride differ in length")
    dtype = dtype or storage.dtype
    if dtype is None:
        raise pickle.UnpicklingError("tensor has no dtype")
    return TensorRecord(storage, offset, size_t, stride_t, dtype)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> TensorRecord:
    return _rebuild(storage, offset, size, stride, None)


def _rebuild_tensor_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = None,
                       hooks: Any = None, dtype: Any = None, *rest: Any) -> TensorRecord:
    if not isinstance(dtype, DType):
        raise pickle.UnpicklingError("_rebuild_tensor_v3 without a dtype")
    return _rebuild(storage, offset, size, stride, dtype.name)


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


def _latin1_encode(text: Any, encoding: Any = "utf-8", *rest: Any) -> bytes:
    """``_codecs.encode``: protocol-2 pickles (torch's default) spell ``bytes`` this way."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r} is not allowed")
    return text.encode(encoding)


def _safe_set(items: Any = ()) -> set:
    return set(items)


def _safe_frozenset(items: Any = ()) -> frozenset:
    return frozenset(items)


def _device(kind: Any, index: Any = None) -> str:
    return f"{kind}:{index}" if index is not None else str(kind)


def _build_allow_list() -> dict[tuple[str, str], Any]:
    allowed: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
        ("torch", "Size"): tuple,
        ("torch", "device"): _device,
        ("_codecs", "encode"): _latin1_encode,
        ("builtins", "set"): _safe_set,
        ("builtins", "frozenset"): _safe_frozenset,
        ("torch.storage", "UntypedStorage"): StorageType("UntypedStorage", None),
        ("torch", "UntypedStorage"): StorageType("UntypedStorage", None),
    }
    for cls, dtype in STORAGE_DTYPE.items():
        allowed[("torch", cls)] = StorageType(cls, dtype)
        allowed[("torch.cuda", cls)] = StorageType(cls, dtype)  # storages of very old GPU saves
    for name in ITEMSIZE:
        allowed[("torch", name)] = DType(name)
    for alias, name in TORCH_ALIASES.items():
        allowed[("torch", alias)] = DType(name)
    return allowed


ALLOWED_GLOBALS = _build_allow_list()


_MEMO_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})
_BUFFER_OPS = frozenset({"NEXT_BUFFER", "READONLY_BUFFER", "BYTEARRAY8"})


def check_opcodes(stream: BinaryIO) -> None:
    """Walk one pickle's opcodes without executing them and refuse resource bombs.

    CPython's unpickler sizes its memo table by the largest index it is given, so a single
    ``LONG_BINPUT 1258647924`` in a 500-byte file makes it allocate gigabytes. A memo index can
    never legitimately exceed the number of bytes in the pickle. Protocol-5 buffer opcodes are
    refused too: torch never writes them. Leaves ``stream`` where it was.
    """
    import pickletools
    import warnings

    start = stream.seek(0, io.SEEK_CUR)
    limit = stream.seek(0, io.SEEK_END) - start
    stream.seek(start)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # hostile STRING opcodes trip escape-sequence warnings
            for opcode, arg, _ in pickletools.genops(stream):
                if opcode.name in _MEMO_OPS and isinstance(arg, int) and arg > limit:
                    raise pickle.UnpicklingError(f"memo index {arg} is implausible for a {limit}-byte pickle")
                if opcode.name in _BUFFER_OPS:
                    raise pickle.UnpicklingError(f"opcode {opcode.name} is not used by torch.save")
    except (ValueError, EOFError) as exc:  # unknown opcode, truncated argument
        raise pickle.UnpicklingError(str(exc)[:120]) from None
    finally:
        stream.seek(start)


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles with allow-listed stand-ins only; records every other global's name."""

    def __init__(self, data: bytes | BinaryIO, persistent: Callable[[Any], Any] | None = None) -> None:
        self._stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
        super().__init__(self._stream)
        self._persistent = persistent
        self.foreign: list[str] = []

    def load(self) -> Any:
        check_opcodes(self._stream)
        return super().load()

    def find_class(self, module: str, name: str) -> Any:
        found = ALLOWED_GLOBALS.get((module, name))
        if found is not None:
            return found
        full = f"{module}.{name}"
        if full not in self.foreign:
            self.foreign.append(full)
        return Opaque(full)

    def persistent_load(self, pid: Any) -> Any:
        if self._persistent is None:
            raise pickle.UnpicklingError("persistent id in a pickle that may not have one")
        return self._persistent(pid)


def zip_storage_ref(pid: Any) -> StorageRef | Opaque:
    """Turn torch.save's ``('storage', StorageType, key, location, numel)`` into a record."""
    if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage":
        raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
    _, stype, key, location, numel = pid
    if isinstance(stype, Opaque):
        return stype
    if not isinstance(stype, StorageType) or not isinstance(key, str) or not isinstance(location, str) \
            or type(numel) is not int or numel < 0:
        raise pickle.UnpicklingError(f"malformed storage id {pid!r:.80}")
    return StorageRef(key, stype.dtype, location, numel)


def legacy_storage_ref(pid: Any) -> StorageRef | Opaque:
    """Legacy (non-zip) torch.save ids: ``('storage', type, key, location, numel, view)``."""
    if not isinstance(pid, tuple) or len(pid) != 6 or pid[0] != "storage":
        raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
    return zip_storage_ref(pid[:5])


@dataclass(frozen=True, slots=True)
class Walked:
    container: str
    tensors: list[tuple[str, TensorRecord]]


def walk(obj: Any) -> Walked:
    """Find every tensor in an unpickled object, with its key path; cycle- and size-safe."""
    if isinstance(obj, TensorRecord):
        container = "tensor"
    elif isinstance(obj, dict):
        container = "dict"
    elif isinstance(obj, (list, tuple)):
        container = "list"
    else:
        container = "other"
    found: list[tuple[str, TensorRecord]] = []
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", obj)]
    nodes = 0
    while stack:
        path, node = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES or len(found) > _MAX_TENSORS:
            raise pickle.UnpicklingError("object graph too large for a cache file")
        if isinstance(node, TensorRecord):
            found.append((path, node))
            continue
        if isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, dict):
                items = [((f"{path}.{k}" if path else str(k)), v) for k, v in node.items()]
            else:
                items = [(f"{path}[{i}]", v) for i, v in enumerate(node)]
            stack.extend(reversed(items))
    return Walked(container, found)
