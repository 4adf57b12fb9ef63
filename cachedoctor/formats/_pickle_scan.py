"""Static analysis of a pickle: every global it names, found without executing anything.

The restricted unpickler (``_unpickle.py``) learns a file's *structure*; this module decides
whether the file is *safe*. It walks the opcodes the way CPython's C unpickler would — a value
stack and a separate mark stack with its fence — but only to know which constant strings reach a
``STACK_GLOBAL`` and where the pickle ends. So an opcode that a stricter reader refuses
(``BYTEARRAY8``, a large memo index, ``_codecs.encode`` with rot13) cannot hide a global that
follows it: the walk stops only where the real unpickler would stop too (an unknown opcode, a
truncated argument, a stack underflow, a missing memo entry), and everything it reached before
is reported.

Every limit is checked before anything is allocated: argument lengths are read from their
prefixes and compared with :data:`LIMITS` before the argument is sliced, and the walk stops at
the opcode, memo, stack and mark caps. A pickle over a limit is a *resource bomb*: no cache file
comes near them, and torch.load would spend minutes or gigabytes on it.
"""

from __future__ import annotations

import _compat_pickle
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

from cachedoctor.formats._dtypes import ITEMSIZE, STORAGE_DTYPE, TORCH_ALIASES


@dataclass(frozen=True, slots=True)
class Limits:
    pickle_bytes: int = 16 * 1024 * 1024
    opcodes: int = 500_000
    memo: int = 65_536  # memo writes; also the largest memo index accepted
    stack: int = 50_000
    marks: int = 1_000
    string: int = 4 * 1024 * 1024  # one argument (str, bytes, long, text line)


LIMITS = Limits()

#: What torch.save legitimately writes (and torch's own weights_only unpickler admits), spelled
#: as the unpickler resolves it: protocol 0-2 names pass through ``_compat_pickle`` first, so
#: ``__builtin__.set`` is ``builtins.set``.
_TENSOR_REBUILDS = (
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_cpu_tensor",
    "_rebuild_device_tensor_from_numpy",
)
_QSCHEMES = (
    "per_tensor_affine",
    "per_channel_affine",
    "per_tensor_symmetric",
    "per_channel_symmetric",
    "per_channel_affine_float_qparams",
)
_LAYOUTS = ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged")


def _allowed() -> frozenset[str]:
    names = {
        "collections.OrderedDict",
        "collections.Counter",
        "builtins.set",
        "builtins.frozenset",
        "builtins.complex",
        "builtins.bytearray",
        "builtins.bytes",
        "_codecs.encode",
        "torch.Size",
        "torch.device",
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch._tensor._rebuild_from_type_v2",
        "torch.storage.UntypedStorage",
        "torch.storage.TypedStorage",
        "torch.UntypedStorage",
        "torch.TypedStorage",
        "torch.storage._LegacyStorage",
    }
    names.update(f"torch._utils.{f}" for f in _TENSOR_REBUILDS)
    names.update(f"torch.{layout}" for layout in _LAYOUTS)
    names.update(f"torch.{scheme}" for scheme in _QSCHEMES)
    for cls in STORAGE_DTYPE:
        names.add(f"torch.{cls}")
        names.add(f"torch.cuda.{cls}")
    names.update(f"torch.{name}" for name in ITEMSIZE)
    names.update(f"torch.{alias}" for alias in TORCH_ALIASES)
    return frozenset(names)


ALLOWED = _allowed()

#: Shown instead of a global's name when the name is computed while loading.
DYNAMIC = "<a global whose name is computed at load time>"
EXTENSION = "<a global from the copyreg extension registry (EXT opcode)>"


def canonical(module: str, name: str) -> str:
    """``module.name`` as the unpickler resolves it (protocol 0-2 pickles use Python 2 names)."""
    key = (module, name)
    if key in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[key]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"


@dataclass(frozen=True, slots=True)
class PickleScan:
    """What one static walk found.

    ``unsafe`` lists the globals outside the allow-list (``DYNAMIC``/``EXTENSION`` for names
    the file computes or borrows); ``end`` is the offset after ``STOP`` (``-1`` when the walk
    stopped early, with ``error`` saying why); ``bomb`` names the limit a resource bomb passed.
    ``calls`` says whether a call opcode (REDUCE, NEWOBJ, INST, OBJ, BUILD) was reached.
    """

    unsafe: tuple[str, ...]
    end: int
    error: str | None = None
    bomb: str | None = None
    calls: bool = False
    opcodes: int = 0

    @property
    def complete(self) -> bool:
        return self.end >= 0


class _Stop(Exception):
    """The walk ends here: the real unpickler would raise at this opcode too."""


class Bomb(Exception):
    """A limit was passed; ``args[0]`` says which."""


# Argument kinds, indexed by opcode byte.
_NONE, _FIXED, _LEN1, _LEN4, _LEN8, _LINE, _LINE2, _SLEN4 = range(8)
_ARG: list[tuple[int, int]] = [(-1, 0)] * 256
for _code, _kind, _size in (
    ("(", _NONE, 0),
    (".", _NONE, 0),
    ("0", _NONE, 0),
    ("1", _NONE, 0),
    ("2", _NONE, 0),
    ("F", _LINE, 0),
    ("I", _LINE, 0),
    ("J", _FIXED, 4),
    ("K", _FIXED, 1),
    ("L", _LINE, 0),
    ("M", _FIXED, 2),
    ("N", _NONE, 0),
    ("P", _LINE, 0),
    ("Q", _NONE, 0),
    ("R", _NONE, 0),
    ("S", _LINE, 0),
    ("T", _SLEN4, 0),
    ("U", _LEN1, 0),
    ("V", _LINE, 0),
    ("X", _LEN4, 0),
    ("a", _NONE, 0),
    ("b", _NONE, 0),
    ("c", _LINE2, 0),
    ("d", _NONE, 0),
    ("}", _NONE, 0),
    ("e", _NONE, 0),
    ("g", _LINE, 0),
    ("h", _FIXED, 1),
    ("i", _LINE2, 0),
    ("j", _FIXED, 4),
    ("l", _NONE, 0),
    ("]", _NONE, 0),
    ("o", _NONE, 0),
    ("p", _LINE, 0),
    ("q", _FIXED, 1),
    ("r", _FIXED, 4),
    ("s", _NONE, 0),
    ("t", _NONE, 0),
    (")", _NONE, 0),
    ("u", _NONE, 0),
    ("G", _FIXED, 8),
    ("B", _LEN4, 0),
    ("C", _LEN1, 0),
    ("\x80", _FIXED, 1),
    ("\x81", _NONE, 0),
    ("\x82", _FIXED, 1),
    ("\x83", _FIXED, 2),
    ("\x84", _FIXED, 4),
    ("\x85", _NONE, 0),
    ("\x86", _NONE, 0),
    ("\x87", _NONE, 0),
    ("\x88", _NONE, 0),
    ("\x89", _NONE, 0),
    ("\x8a", _LEN1, 0),
    ("\x8b", _SLEN4, 0),
    ("\x8c", _LEN1, 0),
    ("\x8d", _LEN8, 0),
    ("\x8e", _LEN8, 0),
    ("\x8f", _NONE, 0),
    ("\x90", _NONE, 0),
    ("\x91", _NONE, 0),
    ("\x92", _NONE, 0),
    ("\x93", _NONE, 0),
    ("\x94", _NONE, 0),
    ("\x95", _FIXED, 8),
    ("\x96", _LEN8, 0),
    ("\x97", _NONE, 0),
    ("\x98", _NONE, 0),
):
    _ARG[ord(_code)] = (_kind, _size)

_STR_OPS = frozenset(b"X\x8c\x8dV")  # push a str constant
_PY2_STR_OPS = frozenset(b"STU")  # Python 2 str: decoded to str by default (encoding="ASCII")
_UNSIGNED = {0x6A: "<I", 0x72: "<I", 0x4A: "<i", 0x84: "<i", 0x95: "<Q"}  # LONG_BINGET/PUT, BININT, EXT4, FRAME

# Stack-effect categories, indexed by opcode byte.
(
    _C_PUSH,
    _C_STR,
    _C_PUT,
    _C_GET,
    _C_FIXED,
    _C_MARK,
    _C_MARKED,
    _C_GLOBAL,
    _C_INST,
    _C_STACK_GLOBAL,
    _C_EXT,
    _C_STOP,
    _C_PROTO,
    _C_NOOP,
    _C_BUFFER,
) = range(15)
_CAT = [-1] * 256
for _ops, _cat in (
    (b"FIJKLMNGBC\x8a\x8b\x8e\x96\x88\x89]})\x8fP\x97", _C_PUSH),
    (b"X\x8c\x8dVSTU", _C_STR),
    (b"\x94pqr", _C_PUT),
    (b"ghj", _C_GET),
    (b"ab0Q\x85\x86\x87R\x81s\x922", _C_FIXED),
    (b"(", _C_MARK),
    (b"eu\x901ltd\x91o", _C_MARKED),
    (b"c", _C_GLOBAL),
    (b"i", _C_INST),
    (b"\x93", _C_STACK_GLOBAL),
    (b"\x82\x83\x84", _C_EXT),
    (b".", _C_STOP),
    (b"\x80", _C_PROTO),
    (b"\x95", _C_NOOP),
    (b"\x98", _C_BUFFER),
):
    for _op in _ops:
        _CAT[_op] = _cat
_CALLS = frozenset(b"R\x81\x92iob")
_MARKED_PUSH = frozenset(b"ltd\x91o")  # LIST, TUPLE, DICT, FROZENSET, OBJ push their result
_MARKED_ONTO = frozenset(b"eu\x90")  # APPENDS, SETITEMS, ADDITEMS need an object below the mark


def scan(data: bytes | memoryview, start: int = 0, limits: Limits = LIMITS) -> PickleScan:
    """Walk one pickle starting at ``start`` of ``data`` (which may hold more after it)."""
    walker = _Walker(data, start, limits)
    try:
        end = walker.run()
        return PickleScan(tuple(walker.unsafe), end, None, None, walker.calls, walker.count)
    except Bomb as exc:
        return PickleScan(tuple(walker.unsafe), -1, None, str(exc), walker.calls, walker.count)
    except _Stop as exc:
        return PickleScan(tuple(walker.unsafe), -1, str(exc), None, walker.calls, walker.count)


@lru_cache(maxsize=1024)
def scan_bytes(data: bytes) -> PickleScan:
    """:func:`scan` memoised on the bytes: files of one bucket carry byte-identical pickles."""
    return scan(data)


class _Walker:
    __slots__ = ("data", "pos", "limits", "unsafe", "calls", "count")

    def __init__(self, data: bytes | memoryview, start: int, limits: Limits) -> None:
        self.data = data
        self.pos = start
        self.limits = limits
        self.unsafe: list[str] = []
        self.calls = False
        self.count = 0

    def _global(self, module: object, name: object) -> None:
        if isinstance(module, str) and isinstance(name, str):
            full = canonical(module, name)
            if full in ALLOWED:
                return
        else:
            full = DYNAMIC
        if full not in self.unsafe:
            self.unsafe.append(full)

    # One dispatch loop is the fast way to walk opcodes: `x == A or x == B` and nested ifs inside
    # the elif chain are deliberate (no tuple built per opcode, no extra tests on the way down).
    def run(self) -> int:
        data, limits, arg_table, cat_table = self.data, self.limits, _ARG, _CAT
        end = len(data)
        pos = self.pos
        stack: list[object] = []
        marks: list[int] = []
        memo: dict[int, object] = {}
        fence = 0
        count = 0
        max_ops, max_stack, max_string, max_memo = limits.opcodes, limits.stack, limits.string, limits.memo
        memo_writes = 0
        unpack = struct.unpack_from
        try:
            while True:
                if pos >= end:
                    raise _Stop("pickle data was truncated (no STOP opcode)")
                op = data[pos]
                pos += 1
                count += 1
                if count > max_ops:
                    raise Bomb(f"more than {max_ops:,} opcodes")
                kind, size = arg_table[op]
                arg: object = None
                if kind == _NONE:
                    pass
                elif kind == _FIXED:
                    if pos + size > end:
                        raise _Stop("pickle data was truncated")
                    if size == 1:
                        arg = data[pos]
                    elif size == 2:
                        arg = data[pos] | data[pos + 1] << 8
                    elif op in _UNSIGNED:
                        arg = unpack(_UNSIGNED[op], data, pos)[0]
                    pos += size
                elif kind == _LINE or kind == _LINE2:  # noqa: SIM109
                    line, pos = _line(data, pos, end, max_string)
                    if kind == _LINE2:
                        second, pos = _line(data, pos, end, max_string)
                        arg = (line.decode("utf-8", "replace"), second.decode("utf-8", "replace"))
                    else:
                        arg = _line_value(op, line)
                elif kind >= 0:
                    if kind == _LEN1:
                        if pos >= end:
                            raise _Stop("pickle data was truncated")
                        n = data[pos]
                        pos += 1
                    else:
                        width = 8 if kind == _LEN8 else 4
                        if pos + width > end:
                            raise _Stop("pickle data was truncated")
                        n = unpack("<Q" if width == 8 else "<i" if kind == _SLEN4 else "<I", data, pos)[0]
                        pos += width
                        if n < 0:
                            raise _Stop("negative byte count")
                    if n > max_string:
                        raise Bomb(f"an argument of {n:,} bytes (limit {max_string:,})")
                    if pos + n > end:
                        raise _Stop("pickle data was truncated")
                    if op in _STR_OPS:
                        try:
                            arg = bytes(data[pos : pos + n]).decode("utf-8", "surrogatepass")
                        except UnicodeDecodeError:
                            raise _Stop("undecodable unicode string") from None
                    elif op in _PY2_STR_OPS:
                        arg = bytes(data[pos : pos + n]).decode("latin1")
                    pos += n
                else:
                    raise _Stop(f"invalid load key, {bytes([op])!r}")

                # Stack effects, as CPython's C unpickler applies them.
                cat = cat_table[op]
                if cat == _C_PUSH:
                    stack.append(None)
                elif cat == _C_STR:
                    stack.append(arg)
                elif cat == _C_PUT:
                    if len(stack) <= fence:
                        raise _Stop("unpickling stack underflow at a memo write")
                    index = len(memo) if op == 0x94 else arg
                    if not isinstance(index, int) or index < 0:
                        raise _Stop("invalid memo index")
                    memo_writes += 1
                    if memo_writes > max_memo:
                        raise Bomb(f"more than {max_memo:,} memo entries")
                    if index > max_memo * 16:
                        raise Bomb(f"memo index {index} (limit {max_memo * 16})")
                    memo[index] = stack[-1]
                elif cat == _C_GET:
                    if arg not in memo:
                        raise _Stop(f"memo value {arg!r:.20} not found")
                    stack.append(memo[arg])
                elif cat == _C_FIXED:
                    if op == 0x30 and marks and marks[-1] == len(stack):  # POP takes the mark
                        marks.pop()
                        fence = marks[-1] if marks else 0
                        continue
                    pops, pushes = _FIXED_EFFECT[op]
                    if len(stack) - max(pops, 1) < fence:
                        raise _Stop("unpickling stack underflow")
                    if op in _CALLS:
                        self.calls = True
                    if pops:
                        del stack[-pops:]
                    if pushes:
                        stack.append(stack[-1] if op == 0x32 else None)
                elif cat == _C_MARK:
                    if len(marks) >= limits.marks:
                        raise Bomb(f"more than {limits.marks:,} nested marks")
                    marks.append(len(stack))
                    fence = len(stack)
                elif cat == _C_MARKED:
                    if not marks:
                        raise _Stop("could not find MARK")
                    at = marks.pop()
                    fence = marks[-1] if marks else 0
                    if op == 0x6F:  # OBJ: the class is the first item after the mark
                        if len(stack) <= at:
                            raise _Stop("unpickling stack underflow at OBJ")
                        self.calls = True
                    elif op in _MARKED_ONTO and at <= 0:
                        raise _Stop("unpickling stack underflow")
                    del stack[at:]
                    if op in _MARKED_PUSH:
                        stack.append(None)
                elif cat == _C_GLOBAL or cat == _C_INST:  # noqa: SIM109
                    if cat == _C_INST:
                        if not marks:
                            raise _Stop("could not find MARK")
                        del stack[marks.pop() :]
                        fence = marks[-1] if marks else 0
                        self.calls = True
                    module, name = cast("tuple[str, str]", arg)  # a LINE2 argument
                    self._global(module, name)
                    stack.append(None)
                elif cat == _C_STACK_GLOBAL:
                    if len(stack) - 2 < fence:
                        raise _Stop("unpickling stack underflow at STACK_GLOBAL")
                    name_ = stack.pop()
                    self._global(stack.pop(), name_)
                    stack.append(None)
                elif cat == _C_EXT:
                    if EXTENSION not in self.unsafe:
                        self.unsafe.append(EXTENSION)
                    stack.append(None)
                elif cat == _C_STOP:
                    if len(stack) <= fence:
                        raise _Stop("unpickling stack underflow at STOP")
                    return pos
                elif cat == _C_PROTO:
                    if cast(int, arg) > 5:
                        raise _Stop(f"unsupported pickle protocol: {arg}")
                elif cat == _C_BUFFER:  # noqa: SIM102
                    if len(stack) <= fence:
                        raise _Stop("unpickling stack underflow")
                if len(stack) > max_stack:
                    raise Bomb(f"a stack of more than {max_stack:,} items")
        finally:
            self.count = count


def _line(data: bytes | memoryview, pos: int, end: int, limit: int) -> tuple[bytes, int]:
    """One newline-terminated text argument; longer than ``limit`` is a bomb, unterminated a stop."""
    stop = min(end, pos + limit + 1)
    chunk = bytes(data[pos:stop])
    nl = chunk.find(b"\n")
    if nl < 0:
        if stop < end:
            raise Bomb(f"a text argument longer than {limit:,} bytes")
        raise _Stop("pickle data was truncated (a line without its newline)")
    return chunk[:nl], pos + nl + 1


#: (items popped, items pushed) for the opcodes with a fixed effect (the object a
#: REDUCE/NEWOBJ/BUILD/APPEND/SETITEM acts on counts among the popped only when it is replaced).
_FIXED_EFFECT = {
    0x61: (1, 0),  # APPEND: value (the list stays)
    0x62: (1, 0),  # BUILD: state
    0x30: (1, 0),  # POP
    0x51: (1, 1),  # BINPERSID
    0x85: (1, 1),
    0x86: (2, 1),
    0x87: (3, 1),  # TUPLE1..3
    0x52: (2, 1),  # REDUCE
    0x81: (2, 1),  # NEWOBJ
    0x92: (3, 1),  # NEWOBJ_EX
    0x73: (2, 0),  # SETITEM
    0x32: (0, 1),  # DUP
}


def _line_value(op: int, line: bytes) -> object:
    """Check a protocol-0 text argument the way the C unpickler parses it."""
    text = line.decode("latin1")
    if op in (0x49, 0x4C, 0x46, 0x67, 0x70):
        text = text.split("\0", 1)[0]  # C parses these up to a NUL (strtol, PyLong_FromString)
    try:
        if op == 0x49:  # INT
            if text in ("00", "01"):
                return None
            _int(text)
        elif op == 0x4C:  # LONG
            _int(text[:-1] if text.endswith("L") else text)
        elif op == 0x46:  # FLOAT
            float(text)
        elif op in (0x67, 0x70):  # GET, PUT
            return int(text)
    except ValueError:
        raise _Stop(f"invalid literal in a text opcode: {text[:20]!r}") from None
    if op == 0x53:  # STRING: must be quoted
        stripped = text.rstrip()
        if len(stripped) < 2 or stripped[0] != stripped[-1] or stripped[0] not in "'\"":
            raise _Stop("the STRING opcode argument must be quoted")
        return stripped[1:-1]
    if op == 0x56:  # UNICODE, raw-unicode-escape
        try:
            return line.decode("raw-unicode-escape")
        except UnicodeDecodeError:
            raise _Stop("undecodable UNICODE argument") from None
    return None


def _int(text: str) -> int:
    """An integer as ``strtol(s, NULL, 0)`` reads it (decimal, ``0x``, ``0o`` and leading zeros)."""
    try:
        return int(text, 0)
    except ValueError:
        return int(text, 10)


__all__ = ["ALLOWED", "DYNAMIC", "EXTENSION", "LIMITS", "Limits", "PickleScan", "canonical", "scan", "scan_bytes"]
