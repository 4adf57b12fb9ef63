"""The opcode tables of the static pickle walk (``_pickle_scan.py``): each opcode's argument
kind and stack effect, the text-argument parsers, and the two ways a walk ends early (the real
unpickler would raise there too, or a limit was passed). Tables indexed by opcode byte keep the
walk's inner loop to list lookups.
"""

from __future__ import annotations


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
#: Fixed-width arguments decoded with struct: LONG_BINGET/PUT, BININT, EXT4, FRAME, BINFLOAT.
_UNSIGNED = {0x6A: "<I", 0x72: "<I", 0x4A: "<i", 0x84: "<i", 0x95: "<Q", 0x47: ">d"}

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
_NUMBER_OPS = frozenset(b"FIJKLMG\x8a\x8b")  # push the number their argument holds
_LONG_OPS = frozenset(b"\x8a\x8b")  # LONG1, LONG4: a little-endian two's complement argument
_BYTES_OPS = frozenset(b"BC\x8e\x96")  # BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
_BOX_OPS = {0x5D: "list", 0x7D: "dict", 0x8F: "set"}  # EMPTY_LIST, EMPTY_DICT, EMPTY_SET
_MARKED_PUSH = frozenset(b"ltd\x91o")  # LIST, TUPLE, DICT, FROZENSET, OBJ push their result
_MARKED_ONTO = frozenset(b"eu\x90")  # APPENDS, SETITEMS, ADDITEMS need an object below the mark


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
                return text == "01"
            return _int(text)
        if op == 0x4C:  # LONG
            return _int(text[:-1] if text.endswith("L") else text)
        if op == 0x46:  # FLOAT
            return float(text)
        if op in (0x67, 0x70):  # GET, PUT
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
