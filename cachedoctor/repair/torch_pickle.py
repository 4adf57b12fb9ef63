"""The pickle of a torch.save file, read and written again without torch, for the lossless
rewrites of the common files: one tensor, or a dict of tensors (``torch_rewrite.py``).

:func:`read_pickle` follows a ``data.pkl`` only as far as torch.save writes one for such an
object: protocol 2, ``torch._utils._rebuild_tensor_v2`` with a ``torch.<Type>Storage``
persistent id, ``collections.OrderedDict`` (a container, and each tensor's empty hooks), ints,
bools, strings, tuples and dicts, nothing else; any other opcode, global or shape returns
``None`` (the caller then rewrites with torch). It builds nothing from the file but these
records, and is bounded by the pickle's length.

:func:`write_pickle` writes the bytes torch.save's pickler (CPython's C ``Pickler``, protocol 2,
torch's ``persistent_id``) writes for the same object once loaded on the cpu: every opcode and
memo index as that pickler assigns them, objects torch makes anew for each tensor (size and
stride tuples, the persistent id, the hooks) memoised anew, the ones it shares (the rebuild
function and storage classes, the ``"storage"`` tag, the ``"cpu"`` location, a storage's key)
fetched from the memo. The tests hold both to torch.save's own bytes.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

#: torch's storage classes (``torch.<name>``) of plain dtypes, and their element sizes.
STORAGE_ITEMSIZE = {
    "DoubleStorage": 8,
    "FloatStorage": 4,
    "HalfStorage": 2,
    "BFloat16Storage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ShortStorage": 2,
    "CharStorage": 1,
    "ByteStorage": 1,
    "BoolStorage": 1,
    "ComplexFloatStorage": 8,
    "ComplexDoubleStorage": 16,
}

#: Items of one dict at most: the pickler writes 1,000 a batch, and a cache file holds a few.
MAX_ITEMS = 999


class Stored(NamedTuple):  # (tuples: a class of these is made at 1/10 of a dataclass's import cost)
    """One storage: its record (``data/<key>``), class, device and length in elements."""

    key: str
    cls: str
    location: str
    numel: int


class Tensor(NamedTuple):
    storage: Stored
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


class Saved(NamedTuple):
    """The object of a file: a bare tensor (``items is None``), or a dict of tensors by name."""

    tensor: Tensor | None = None
    items: tuple[tuple[str, Tensor], ...] | None = None
    ordered: bool = False  # a ``collections.OrderedDict``, not a plain dict

    def tensors(self) -> list[Tensor]:
        return [self.tensor] if self.tensor is not None else [t for _k, t in self.items or ()]


class _Outside(Exception):
    """The pickle holds more than this module follows."""


class _Global:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _Dict:
    __slots__ = ("items", "ordered", "hooks")

    def __init__(self, ordered: bool) -> None:
        self.items: dict[str, object] = {}
        self.ordered = ordered
        self.hooks = False  # a tensor's backward hooks: must stay empty


_U32, _U16, _I32 = struct.Struct("<I"), struct.Struct("<H"), struct.Struct("<i")
_REBUILD = _Global("_rebuild_tensor_v2")
_ODICT = _Global("OrderedDict")
_MARK = object()
_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): _REBUILD,
    ("collections", "OrderedDict"): _ODICT,
    **{("torch", cls): _Global(cls) for cls in STORAGE_ITEMSIZE},
}


def read_pickle(data: bytes | memoryview) -> Saved | None:
    """The object ``data`` (a ``data.pkl``) describes, or ``None`` when it is not one this module
    writes back (see the module's docstring)."""
    try:
        return _Reader(bytes(data)).run()
    except (_Outside, IndexError, struct.error, UnicodeDecodeError):
        return None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.stack: list[object] = []
        self.memo: dict[int, object] = {}
        self.storages: dict[str, Stored] = {}

    def since_mark(self) -> list[object]:
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is _MARK:
                items = stack[i + 1 :]
                del stack[i:]
                return items
        raise _Outside

    def run(self) -> Saved:
        data, stack, memo = self.data, self.stack, self.memo
        if data[:2] != b"\x80\x02":
            raise _Outside
        pos, end = 2, len(data)
        while pos < end:  # (an index past the end raises IndexError, or a short slice fails a check)
            op = data[pos]
            pos += 1
            if op == 0x71:  # q BINPUT
                memo[data[pos]] = stack[-1]
                pos += 1
            elif op == 0x28:  # ( MARK
                stack.append(_MARK)
            elif op == 0x4B:  # K BININT1
                stack.append(data[pos])
                pos += 1
            elif op == 0x58:  # X BINUNICODE
                n = _U32.unpack_from(data, pos)[0]
                text = data[pos + 4 : pos + 4 + n]
                if len(text) != n:
                    raise _Outside
                stack.append(text.decode("utf-8", "surrogatepass"))
                pos += 4 + n
            elif op in (0x85, 0x86, 0x87):  # TUPLE1-3
                n = op - 0x84
                items = tuple(stack[-n:])
                if len(items) != n or _MARK in items:
                    raise _Outside
                del stack[-n:]
                stack.append(items)
            elif op == 0x74:  # t TUPLE
                stack.append(tuple(self.since_mark()))
            elif op == 0x68 or op == 0x6A:  # h BINGET, j LONG_BINGET
                if op == 0x68:
                    index, pos = data[pos], pos + 1
                else:
                    index, pos = _U32.unpack_from(data, pos)[0], pos + 4
                value = memo.get(index)
                if not isinstance(value, (str, tuple, _Global)):  # a shared tensor or dict: torch's business
                    raise _Outside
                stack.append(value)
            elif op == 0x72:  # r LONG_BINPUT
                memo[_U32.unpack_from(data, pos)[0]] = stack[-1]
                pos += 4
            elif op == 0x4D:  # M BININT2
                stack.append(_U16.unpack_from(data, pos)[0])
                pos += 2
            elif op == 0x4A:  # J BININT
                stack.append(_I32.unpack_from(data, pos)[0])
                pos += 4
            elif op == 0x8A:  # LONG1
                n = data[pos]
                digits = data[pos + 1 : pos + 1 + n]
                if len(digits) != n:
                    raise _Outside
                stack.append(int.from_bytes(digits, "little", signed=True))
                pos += 1 + n
            elif op == 0x88 or op == 0x89:  # NEWTRUE, NEWFALSE
                stack.append(op == 0x88)
            elif op == 0x29:  # ) EMPTY_TUPLE
                stack.append(())
            elif op == 0x63:  # c GLOBAL
                module_end = data.find(b"\n", pos)
                name_end = data.find(b"\n", module_end + 1) if module_end >= 0 else -1
                if name_end < 0:
                    raise _Outside
                found = _GLOBALS.get(
                    (data[pos:module_end].decode("ascii"), data[module_end + 1 : name_end].decode("ascii"))
                )
                if found is None:
                    raise _Outside
                stack.append(found)
                pos = name_end + 1
            elif op == 0x51:  # Q BINPERSID
                stack.append(self.storage(stack.pop()))
            elif op == 0x52:  # R REDUCE
                args = stack.pop()
                stack.append(self.reduce(stack.pop(), args))
            elif op == 0x7D:  # } EMPTY_DICT
                stack.append(_Dict(ordered=False))
            elif op == 0x73:  # s SETITEM
                value, key = stack.pop(), stack.pop()
                self.set_items(stack[-1], [key, value])
            elif op == 0x75:  # u SETITEMS
                pairs = self.since_mark()
                self.set_items(stack[-1], pairs)
            elif op == 0x2E:  # . STOP
                if len(stack) != 1 or pos != end:
                    raise _Outside
                return _saved(stack[0])
            else:
                raise _Outside
        raise _Outside

    def storage(self, pid: object) -> Stored:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Outside
        _tag, cls, key, location, numel = pid
        if not (isinstance(cls, _Global) and cls.name in STORAGE_ITEMSIZE):
            raise _Outside
        if not (isinstance(key, str) and isinstance(location, str) and type(numel) is int and numel >= 0):
            raise _Outside
        stored = Stored(key, cls.name, location, numel)
        seen = self.storages.setdefault(key, stored)
        if (seen.cls, seen.numel) != (stored.cls, stored.numel):
            raise _Outside  # one record read as two types or lengths
        return seen

    def reduce(self, func: object, args: object) -> object:
        if func is _ODICT and args == ():
            return _Dict(ordered=True)
        if func is not _REBUILD or not (isinstance(args, tuple) and len(args) == 6):
            raise _Outside
        storage, offset, size, stride, grad, hooks = args
        if not (isinstance(storage, Stored) and type(offset) is int and offset >= 0 and type(grad) is bool):
            raise _Outside
        if not (isinstance(hooks, _Dict) and hooks.ordered and not hooks.items and not hooks.hooks):
            raise _Outside
        hooks.hooks = True
        if not (_dims(size) and _dims(stride) and len(size) == len(stride)):
            raise _Outside
        return Tensor(storage, offset, size, stride)

    def set_items(self, target: object, flat: list[object]) -> None:
        if not isinstance(target, _Dict) or target.hooks or len(flat) % 2:
            raise _Outside
        for key, value in zip(flat[::2], flat[1::2], strict=True):
            if not (isinstance(key, str) and isinstance(value, Tensor)):
                raise _Outside
            target.items[key] = value
        if len(target.items) > MAX_ITEMS:
            raise _Outside


def _dims(value: object) -> bool:
    return isinstance(value, tuple) and all(type(v) is int and v >= 0 for v in value)


def _saved(top: object) -> Saved:
    if isinstance(top, Tensor):
        return Saved(tensor=top)
    if not isinstance(top, _Dict) or top.hooks:
        raise _Outside
    # One-character keys are the interpreter's shared strings, as a storage key ("0") may be:
    # the pickler would fetch one from the memo where this writer does not. torch does those.
    if any(len(key) < 2 for key in top.items):
        raise _Outside
    return Saved(items=tuple(top.items.items()), ordered=top.ordered)  # type: ignore[arg-type]


def write_pickle(saved: Saved) -> bytes:
    """The ``data.pkl`` torch.save writes for ``saved`` (each tensor on the cpu, its storage under
    its ``key``; storages with equal keys are one storage)."""
    out = _Writer()
    if saved.items is None:
        assert saved.tensor is not None
        out.tensor(saved.tensor)
    else:
        if saved.ordered:  # OrderedDict.__reduce__: the class, no arguments, then its items
            out.glob("collections", "OrderedDict")
            out.raw(b")R")
        else:
            out.raw(b"}")
        out.put(object())
        items = saved.items
        if len(items) == 1:
            out.string(items[0][0], object())
            out.tensor(items[0][1])
            out.raw(b"s")
        elif items:
            out.raw(b"(")
            for key, tensor in items:
                out.string(key, object())
                out.tensor(tensor)
            out.raw(b"u")
    out.raw(b".")
    return bytes(out.out)


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.memo: dict[object, int] = {}

    def raw(self, data: bytes) -> None:
        self.out += data

    def put(self, token: object) -> None:
        index = self.memo[token] = len(self.memo)
        self.out += b"q" + bytes((index,)) if index < 256 else b"r" + struct.pack("<I", index)

    def fetched(self, token: object) -> bool:
        index = self.memo.get(token)
        if index is None:
            return False
        self.out += b"h" + bytes((index,)) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def glob(self, module: str, name: str) -> None:
        token = ("global", module, name)
        if not self.fetched(token):
            self.out += f"c{module}\n{name}\n".encode("ascii")
            self.put(token)

    def string(self, text: str, token: object) -> None:
        if not self.fetched(token):
            data = text.encode("utf-8", "surrogatepass")
            self.out += b"X" + struct.pack("<I", len(data)) + data
            self.put(token)

    def integer(self, n: int) -> None:
        if 0 <= n < 0x100:
            self.out += b"K" + bytes((n,))
        elif 0 <= n < 0x10000:
            self.out += b"M" + struct.pack("<H", n)
        elif -0x80000000 <= n < 0x80000000:
            self.out += b"J" + struct.pack("<i", n)
        else:
            data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)  # pickle's encode_long
            self.out += b"\x8a" + bytes((len(data),)) + data

    def dims(self, values: tuple[int, ...]) -> None:
        if not values:
            self.out += b")"  # the empty tuple is never memoised
            return
        if len(values) > 3:
            self.out += b"("
        for v in values:
            self.integer(v)
        self.out += b"t" if len(values) > 3 else bytes((0x84 + len(values),))
        self.put(object())

    def tensor(self, t: Tensor) -> None:
        """``Tensor.__reduce_ex__``: ``_rebuild_tensor_v2(storage, offset, size, stride,
        requires_grad=False, OrderedDict())``, the storage as torch's persistent id."""
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out += b"(("
        self.string("storage", "storage")
        self.glob("torch", t.storage.cls)
        self.string(t.storage.key, ("key", t.storage.key))
        self.string("cpu", "cpu")
        self.integer(t.storage.numel)
        self.out += b"t"
        self.put(object())
        self.out += b"Q"
        self.integer(t.offset)
        self.dims(t.size)
        self.dims(t.stride)
        self.out += b"\x89"
        self.glob("collections", "OrderedDict")
        self.out += b")R"
        self.put(object())
        self.out += b"t"
        self.put(object())
        self.out += b"R"
        self.put(object())


__all__ = ["MAX_ITEMS", "STORAGE_ITEMSIZE", "Saved", "Stored", "Tensor", "read_pickle", "write_pickle"]
