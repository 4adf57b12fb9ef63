"""A restricted unpickler that learns what a torch pickle describes without running it.

``find_class`` resolves only an allow-list of names, and resolves them to small stand-ins
defined here (never to torch itself), so nothing from the file is imported or called: a tensor
becomes a :class:`TensorRecord` of its storage id, offset, size and stride. Any other global is
recorded by name and replaced by an inert :class:`Opaque` object, so a malicious ``__reduce__``
(``os.system``...) is reported, never executed. torch is not imported.

Whether a file is *safe* is decided by the static walk in ``_pickle_scan.py``, which every
caller runs first: it also refuses resource bombs before this unpickler allocates anything.
This module only describes what a safe pickle holds, and does so in bounded time: the object
walk is iterative with a node cap, key paths are built only for the tensors found, and error
messages format at most a few dozen characters of hostile objects.
"""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from cachedoctor.formats._dtypes import ITEMSIZE, STORAGE_DTYPE, TORCH_ALIASES
from cachedoctor.formats._pickle_scan import canonical
from cachedoctor.formats._unpickle_bounds import (
    _MAX_UNFOLDED,
    Opaque,
    PickleBomb,
    Refused,
    _Copies,
    refuse_unfolding,
    short,
    unfolded_size,
)
from cachedoctor.formats.interface import TensorMeta

_MAX_TENSORS = 100_000
_MAX_NODES = 200_000
_MAX_DEPTH = 1_000

__all__ = ["_MAX_UNFOLDED", "Opaque", "PickleBomb", "Refused", "refuse_unfolding", "short", "unfolded_size"]


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

    @property
    def storage_elements(self) -> int:
        """Elements of the tensor's dtype in its storage (an untyped storage counts bytes)."""
        ref = self.storage
        return ref.numel if ref.dtype is not None else ref.numel // max(ITEMSIZE.get(self.dtype, 1), 1)

    def meta(
        self, key: str, record_bytes: int | None, nonfinite: int | None = None, stats: bytes | None = None
    ) -> TensorMeta:
        """The tensor as readers report it; ``record_bytes`` is its storage record's size, if found."""
        itemsize = ITEMSIZE.get(self.dtype, 1)
        ref = self.storage
        numel = self.storage_elements
        return TensorMeta(
            key=key,
            shape=self.size,
            dtype=self.dtype,
            itemsize=itemsize,
            stride=self.stride,
            offset=self.offset,
            storage=ref.key,
            storage_numel=numel,
            record_bytes=record_bytes,
            location=ref.location,
            nonfinite=nonfinite,
            stats=stats,
        )


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(type(v) is int and v >= 0 for v in value):
        raise pickle.UnpicklingError(f"tensor {what} is not a tuple of non-negative ints: {short(value)}")
    return tuple(value)


def _rebuild(storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None) -> TensorRecord:
    if not isinstance(storage, StorageRef):
        raise pickle.UnpicklingError("tensor without a storage record")
    if type(offset) is not int or offset < 0:
        raise pickle.UnpicklingError(f"tensor storage offset is not a non-negative int: {short(offset)}")
    size_t, stride_t = _ints(size, "size"), _ints(stride, "stride")
    if len(size_t) != len(stride_t):
        raise pickle.UnpicklingError("tensor size and stride differ in length")
    dtype = dtype or storage.dtype
    if dtype is None:
        raise pickle.UnpicklingError("tensor has no dtype")
    return TensorRecord(storage, offset, size_t, stride_t, dtype)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> TensorRecord:
    return _rebuild(storage, offset, size, stride, None)


def _rebuild_tensor_v3(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = None,
    hooks: Any = None,
    dtype: Any = None,
    *rest: Any,
) -> TensorRecord:
    if not isinstance(dtype, DType):
        raise pickle.UnpicklingError("_rebuild_tensor_v3 without a dtype")
    return _rebuild(storage, offset, size, stride, dtype.name)


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


def _safe_set(items: Any = ()) -> set:
    return set(items)


def _safe_frozenset(items: Any = ()) -> frozenset:
    return frozenset(items)


def _safe_complex(real: Any = 0, imag: Any = 0) -> complex:
    if not all(isinstance(v, (int, float)) for v in (real, imag)):
        raise pickle.UnpicklingError("complex from something other than numbers")
    return complex(real, imag)


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
        ("builtins", "set"): _safe_set,
        ("builtins", "frozenset"): _safe_frozenset,
        ("builtins", "complex"): _safe_complex,
        ("collections", "Counter"): OrderedDict,
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


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles with allow-listed stand-ins only; records every other global's name."""

    def __init__(self, data: bytes | BinaryIO, persistent: Callable[[Any], Any] | None = None) -> None:
        self._stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
        super().__init__(self._stream)
        self._persistent = persistent
        self.foreign: list[str] = []
        self._copies = _Copies()
        # The C unpickler does not expose its protocol; a pickle's PROTO comes first. (A PROTO
        # later in the stream changes the real mapping: the static walk, which judges safety,
        # follows every PROTO; this reader only describes the structure.)
        start = self._stream.tell()
        head = self._stream.read(2)
        self._stream.seek(start)
        self._proto = head[1] if len(head) == 2 and head[0] == 0x80 else 0

    def find_class(self, module: str, name: str) -> Any:
        full = canonical(module, name, self._proto)  # __builtin__.set below protocol 3 is builtins.set
        owner, _, attr = full.rpartition(".")
        if full == "_codecs.encode":
            return self._copies.encode
        if full == "builtins.bytearray":
            return self._copies.bytearray
        found = ALLOWED_GLOBALS.get((owner, attr))
        if found is not None:
            return found
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
        refuse_unfolding(pid, "a persistent id")  # torch formats a bad id into its error message
        raise pickle.UnpicklingError(f"unexpected persistent id {short(pid)}")
    _, stype, key, location, numel = pid
    if isinstance(stype, Opaque):
        return stype
    if (
        not isinstance(stype, StorageType)
        or not isinstance(key, str)
        or not isinstance(location, str)
        or type(numel) is not int
        or numel < 0
    ):
        raise pickle.UnpicklingError(f"malformed storage id {short(pid)}")
    return StorageRef(key, stype.dtype, location, numel)


def legacy_storage_ref(pid: Any) -> StorageRef | Opaque:
    """Legacy (non-zip) torch.save ids: ``('storage', type, key, location, numel, view)``."""
    if not isinstance(pid, tuple) or len(pid) != 6 or pid[0] != "storage":
        refuse_unfolding(pid, "a persistent id")
        raise pickle.UnpicklingError(f"unexpected persistent id {short(pid)}")
    return zip_storage_ref(pid[:5])


@dataclass(frozen=True, slots=True)
class Walked:
    container: str
    tensors: list[tuple[str, TensorRecord]]
    texts: tuple[tuple[str, str], ...] = ()  # a dict's own strings (``caption``, ``image_spec[1]``): what an item is


#: A top-level dict's strings kept as ``texts``: at most this many, each cut to this many characters.
_MAX_TEXTS, _MAX_TEXT = 16, 1024


def _texts(obj: Any) -> tuple[tuple[str, str], ...]:
    """The strings a saved dict holds at its top level, and in its short lists (diffusion-pipe's
    ``image_spec`` ``[None, 'images/a.png']``, ``caption`` ``['a cat']``): what names the item a
    cache entry was made from. Bounded: a cache file's dict is not a text store."""
    if not isinstance(obj, dict):
        return ()
    out: list[tuple[str, str]] = []
    for key, value in obj.items():
        if not isinstance(key, str):
            continue
        values = [(key, value)] if isinstance(value, str) else []
        if isinstance(value, (list, tuple)) and len(value) <= 8:
            values = [(f"{key}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str)]
        for name, text in values:
            out.append((name, text[:_MAX_TEXT]))
            if len(out) >= _MAX_TEXTS:
                return tuple(out)
    return tuple(out)


def walk(obj: Any) -> Walked:
    """Find every tensor in an unpickled object, with its key path; cycle- and size-safe.

    Past the node or depth cap it raises :class:`PickleBomb`: a limit no cache file comes near,
    reported as a resource bomb (never as damage: the file may load).

    Iterative, O(nodes): each node keeps a link to its parent, and a path string is built
    only for the tensors found (building one per node is quadratic in the nesting depth).
    """
    if isinstance(obj, TensorRecord):
        container = "tensor"
    elif isinstance(obj, dict):
        container = "dict"
    elif isinstance(obj, (list, tuple)):
        container = "list"
    else:
        container = "other"
    found: list[tuple[int, TensorRecord]] = []
    seen: set[int] = set()
    shared = False
    links: list[tuple[int, Any, bool]] = [(-1, "", False)]  # (parent link, key, is index)
    depths: list[int] = [0]
    stack: list[tuple[int, Any]] = [(0, obj)]
    while stack:
        link, node = stack.pop()
        if len(links) > _MAX_NODES or len(found) > _MAX_TENSORS:
            raise PickleBomb(f"an object graph of more than {_MAX_NODES:,} containers and tensors")
        if isinstance(node, TensorRecord):
            found.append((link, node))
            continue
        if isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                shared = True
                continue
            seen.add(id(node))
            depth = depths[link] + 1
            if depth > _MAX_DEPTH:
                raise PickleBomb(f"objects nested more than {_MAX_DEPTH:,} deep")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            children = []
            for key, value in items:
                if isinstance(value, (dict, list, tuple, TensorRecord)):
                    links.append((link, key, not isinstance(node, dict)))
                    depths.append(depth)
                    children.append((len(links) - 1, value))
                    if len(links) > _MAX_NODES:
                        raise PickleBomb(f"an object graph of more than {_MAX_NODES:,} containers and tensors")
            stack.extend(reversed(children))
    if shared:
        refuse_unfolding(obj, "an object")
    paths = _paths(links, [link for link, _ in found])
    return Walked(container, [(path, rec) for path, (_, rec) in zip(paths, found, strict=True)], _texts(obj))


#: A key path names a tensor in findings: each key is cut to ``_MAX_PART`` characters and the path
#: to ``_MAX_PATH``. One memoised 35 KB key above 60,000 tensors made 60,000 paths of 35 KB
#: each (4 GB) while the loader itself shares the one string.
_MAX_PART, _MAX_PATH = 64, 256
_CUT = "\u2026"


def _part(key: Any) -> str:
    text = key if isinstance(key, str) else short(key)  # str(huge int) raises, str(a DAG) explodes
    return text if len(text) <= _MAX_PART else text[:_MAX_PART] + _CUT


def _paths(links: list[tuple[int, Any, bool]], leaves: list[int]) -> list[str]:
    """``a.b[1]`` for the chain of keys that leads to each of ``leaves``: each container's path
    is built once and shared by what it holds (a path per node from the root is quadratic in
    the nesting depth)."""
    done: dict[int, str] = {0: ""}
    out: list[str] = []
    for leaf in leaves:
        chain: list[int] = []
        link = leaf
        while link not in done:
            chain.append(link)
            link = links[link][0]
        text = done[link]
        for step in reversed(chain):
            parent, key, index = links[step]
            if len(text) < _MAX_PATH:
                part = _part(key)
                text = f"{text}[{part}]" if index else (f"{text}.{part}" if parent > 0 else part)
                if len(text) >= _MAX_PATH:
                    text = text[:_MAX_PATH] + _CUT
            if step != leaf:
                done[step] = text
        out.append(text)
    return out
