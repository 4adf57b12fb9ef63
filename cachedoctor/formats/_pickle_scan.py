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

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

from cachedoctor.formats._call_budget import CallBudget
from cachedoctor.formats._pickle_effects import fixed_value, marked_value
from cachedoctor.formats._pickle_opcodes import (
    _ARG,
    _BOX_OPS,
    _BYTES_OPS,
    _C_BUFFER,
    _C_EXT,
    _C_FIXED,
    _C_GET,
    _C_GLOBAL,
    _C_INST,
    _C_MARK,
    _C_MARKED,
    _C_PROTO,
    _C_PUSH,
    _C_PUT,
    _C_STACK_GLOBAL,
    _C_STOP,
    _C_STR,
    _CALLS,
    _CAT,
    _FIXED,
    _FIXED_EFFECT,
    _LEN1,
    _LEN8,
    _LINE,
    _LINE2,
    _LONG_OPS,
    _MARKED_ONTO,
    _MARKED_PUSH,
    _NONE,
    _NUMBER_OPS,
    _PY2_STR_OPS,
    _SLEN4,
    _STR_OPS,
    _UNSIGNED,
    Bomb,
    _line,
    _line_value,
    _Stop,
)
from cachedoctor.formats._pickle_policy import ALLOWED, DYNAMIC, EXTENSION, LIMITS, Limits, canonical
from cachedoctor.formats._pickle_values import Blob, Box, Global

_ACTS_ON = frozenset({0x61, 0x62, 0x73})  # APPEND, BUILD, SETITEM (as the C unpickler checks)


@dataclass(frozen=True, slots=True)
class PickleScan:
    """What one static walk found.

    ``unsafe`` lists the globals outside the allow-list (``DYNAMIC``/``EXTENSION`` for names
    the file computes or borrows); ``end`` is the offset after ``STOP`` (``-1`` when the walk
    stopped early, with ``error`` saying why); ``bomb`` names the limit a resource bomb passed.
    ``calls`` says whether a call opcode (REDUCE, NEWOBJ, INST, OBJ, BUILD) was reached;
    ``allocated`` the bytes its calls would allocate in the loader (``_call_budget``), for a
    reader that sums the pickles of one file. ``unsafe`` also holds the calls of allowed names
    that cannot be shown safe (``... (cannot be shown safe: ...)``).
    """

    unsafe: tuple[str, ...]
    end: int
    error: str | None = None
    bomb: str | None = None
    calls: bool = False
    opcodes: int = 0
    allocated: int = 0

    @property
    def complete(self) -> bool:
        return self.end >= 0


def scan(data: bytes | memoryview, start: int = 0, limits: Limits = LIMITS) -> PickleScan:
    """Walk one pickle starting at ``start`` of ``data`` (which may hold more after it)."""
    walker = _Walker(data, start, limits)
    end, error, bomb = -1, None, None
    try:
        end = walker.run()
    except Bomb as exc:
        bomb = str(exc)
    except _Stop as exc:
        error = str(exc)
    unsafe = tuple(walker.unsafe)
    return PickleScan(unsafe, end, error, bomb, walker.calls, walker.count, walker.budget.spent)


@lru_cache(maxsize=1024)
def scan_bytes(data: bytes) -> PickleScan:
    """:func:`scan` memoised on the bytes: files of one bucket carry byte-identical pickles."""
    return scan(data)


class _Walker:
    __slots__ = ("data", "pos", "limits", "unsafe", "calls", "count", "budget", "proto")

    def __init__(self, data: bytes | memoryview, start: int, limits: Limits) -> None:
        self.data = data
        self.pos = start
        self.limits = limits
        self.unsafe: list[str] = []
        self.calls = False
        self.count = 0
        self.proto = 0  # the last PROTO opcode's protocol: Python 2 names map only below 3
        self.budget = CallBudget(limits, self._refuse)

    def _refuse(self, what: str) -> None:
        if what not in self.unsafe:
            self.unsafe.append(what)

    def _global(self, module: object, name: object) -> Global | None:
        """The global a GLOBAL or STACK_GLOBAL pushes; names outside the allow-list are recorded."""
        if isinstance(module, str) and isinstance(name, str):
            full = canonical(module, name, self.proto)
            if full in ALLOWED:
                return Global(full)
        else:
            full = DYNAMIC
        self._refuse(full)
        return None if full == DYNAMIC else Global(full)

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
                    if op in _BYTES_OPS:
                        arg = n
                    elif op in _LONG_OPS:
                        arg = int.from_bytes(data[pos : pos + n], "little", signed=True)
                    elif op in _STR_OPS:
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
                    if op in _NUMBER_OPS:
                        stack.append(arg)
                    elif op in _BYTES_OPS:
                        stack.append(Blob(cast(int, arg)))
                    elif op in _BOX_OPS:
                        stack.append(Box(_BOX_OPS[op]))
                    else:  # EMPTY_TUPLE, NEWTRUE, NEWFALSE; NONE, PERSID, NEXT_BUFFER unknown
                        stack.append(() if op == 0x29 else True if op == 0x88 else False if op == 0x89 else None)
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
                    # APPEND, BUILD and SETITEM also need the object they act on above the fence
                    if len(stack) - max(pops, 1) - (op in _ACTS_ON) < fence:
                        raise _Stop("unpickling stack underflow")
                    if op in _CALLS:
                        self.calls = True
                    result = fixed_value(op, stack, pops, self.budget) if op != 0x30 else None
                    if pops:
                        del stack[-pops:]
                    if pushes:
                        stack.append(stack[-1] if op == 0x32 else result)
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
                    result = marked_value(op, stack, at, self.budget)
                    del stack[at:]
                    if op in _MARKED_PUSH:
                        stack.append(result)
                elif cat == _C_GLOBAL or cat == _C_INST:  # noqa: SIM109
                    module, name = cast("tuple[str, str]", arg)  # a LINE2 argument
                    found: object = self._global(module, name)
                    if cat == _C_INST:  # INST: the class named, called with the items after the mark
                        if not marks:
                            raise _Stop("could not find MARK")
                        at = marks.pop()
                        found = self.budget.call(found, tuple(stack[at:]))
                        del stack[at:]
                        fence = marks[-1] if marks else 0
                        self.calls = True
                    stack.append(found)
                elif cat == _C_STACK_GLOBAL:
                    if len(stack) - 2 < fence:
                        raise _Stop("unpickling stack underflow at STACK_GLOBAL")
                    name_ = stack.pop()
                    stack.append(self._global(stack.pop(), name_))
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
                    self.proto = cast(int, arg)
                elif cat == _C_BUFFER:  # noqa: SIM102
                    if len(stack) <= fence:
                        raise _Stop("unpickling stack underflow")
                if len(stack) > max_stack:
                    raise Bomb(f"a stack of more than {max_stack:,} items")
        finally:
            self.count = count


__all__ = ["ALLOWED", "DYNAMIC", "EXTENSION", "LIMITS", "Limits", "PickleScan", "canonical", "scan", "scan_bytes"]
