"""Mutators for the differential fuzz test (``differential.py``): small, seeded edits of cache
files at the places where one loader's parser and another's part ways.

Each mutator takes ``(rng, data, pool)`` and returns the edited bytes, or ``None`` where it does
not apply (no zip end record, no ``.npy`` header...). ``pool`` holds donor members (name, bytes)
taken from every seed, for the splices (an ``.npy`` under a torch zip). The edits are the ones the
issue lists: the zip end record (junk after it, disk numbers, comment length, central directory
offset), bytes prepended, local header fields, a member recompressed (deflate, BZIP2, LZMA),
members renamed or added, ``.npy`` headers (padding past 4,096 bytes, version, a Python 2 ``L``,
shapes ``(True,)``, ``(-1,)``, ``()``, an object dtype), pickle opcodes (the PROTO number,
GLOBAL against STACK_GLOBAL, Python 2 module names, a foreign global reached), truncation and bit
flips. The container mutators (``fuzz_zip_mutations.py``) descend into gzip streams and zip
members, so edits compose.

Nothing here unpickles anything: pickles are read with ``pickletools.genops`` only.
"""

from __future__ import annotations

import io
import pickletools
import random
import re
import struct
import zlib
from collections.abc import Callable

from fuzz_zip_mutations import GZIP, ZIP, Mutator, Pool

NPY_MAGIC = b"\x93NUMPY"
#: The Python 2 spellings the unpickler maps back below protocol 3 (``_compat_pickle``).
PY2_MODULES = {"builtins": ["__builtin__"], "collections": ["UserDict", "UserList"], "copyreg": ["copy_reg"]}
#: Globals no healthy cache reaches; a call of the first few is harmless, ``os.system`` is only
#: put on the stack and dropped (reaching it is what counts).
FOREIGN_CALLS = [("os", "getcwd"), ("posix", "getpid"), ("time", "time"), ("gc", "collect")]
FOREIGN_REACH = [("os", "system"), ("builtins", "eval"), ("subprocess", "Popen")]


# --- npy --------------------------------------------------------------------------------------


def _npy(data: bytes) -> tuple[str, bytes] | None:
    """The header text and the body of an ``.npy`` (any version), or ``None``."""
    if data[:6] != NPY_MAGIC or len(data) < 10:
        return None
    major = data[6]
    size_len = 2 if major == 1 else 4
    (hlen,) = struct.unpack_from("<H" if size_len == 2 else "<I", data, 8)
    start = 8 + size_len
    return data[start : start + hlen].decode("latin1"), data[start + hlen :]


def _npy_build(header: str, body: bytes, version: int, pad_to: int = 64) -> bytes:
    header = header.rstrip("\n ")
    size_len = 2 if version == 1 else 4
    total = 8 + size_len + len(header) + 1
    header = header + " " * ((-total) % pad_to) + "\n"
    if version == 1 and len(header) > 0xFFFF:
        return _npy_build(header, body, 2, pad_to)
    fmt = "<H" if size_len == 2 else "<I"
    return NPY_MAGIC + bytes([version, 0]) + struct.pack(fmt, len(header)) + header.encode("latin1") + body


def _npy_edit(edit: Callable[[random.Random, str, bytes, int], tuple[str, bytes, int] | None]) -> Mutator:
    def mutate(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
        parsed = _npy(data)
        if parsed is None:
            return None
        edited = edit(rng, parsed[0], parsed[1], data[6])
        return None if edited is None else _npy_build(*edited)

    return mutate


def _pad(rng: random.Random, header: str, body: bytes, version: int) -> tuple[str, bytes, int]:
    size = rng.choice([4097, 5000, 70_000])
    return header.rstrip("\n ") + " " * size, body, (2 if size > 0xFFF0 else version)


def _version(rng: random.Random, header: str, body: bytes, version: int) -> tuple[str, bytes, int]:
    return header, body, rng.choice([v for v in (1, 2, 3) if v != version])


def _long_suffix(rng: random.Random, header: str, body: bytes, version: int) -> tuple[str, bytes, int] | None:
    new = re.sub(r"(?<='shape': \()(\d+)", r"\1L", header)
    return None if new == header else (new, body, version)


def _shape(rng: random.Random, header: str, body: bytes, version: int) -> tuple[str, bytes, int] | None:
    shape = rng.choice(["(True,)", "(-1,)", "()", "(0,)", "(1,)", "(2, -1)", "(False,)"])
    new = re.sub(r"'shape': \([^)]*\)", f"'shape': {shape}", header)
    return None if new == header else (new, body, version)


def _object_descr(rng: random.Random, header: str, body: bytes, version: int) -> tuple[str, bytes, int] | None:
    new = re.sub(r"'descr': '[^']*'", f"'descr': {rng.choice(['|O', 'O8', 'object'])!r}", header)
    return None if new == header else (new, body, version)


def _fortran(rng: random.Random, header: str, body: bytes, version: int) -> tuple[str, bytes, int] | None:
    new = header.replace("False", "True") if "'fortran_order': False" in header else header.replace("True", "False")
    return new, body, version


def in_npy_body(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    """The pickle (or raw data) after an ``.npy`` header, mutated, the header kept."""
    parsed = _npy(data)
    if parsed is None or not parsed[1]:
        return None
    body = mutate_once(rng, parsed[1], pool, inner=True)
    return None if body is None else data[: len(data) - len(parsed[1])] + body


# --- pickle opcodes ---------------------------------------------------------------------------


def _ops(p: bytes) -> list[tuple[str, object, int]] | None:
    try:
        return [(op.name, arg, pos) for op, arg, pos in pickletools.genops(p)]
    except Exception:
        return None


def _string(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw if len(raw) < 256 else b"X" + struct.pack("<I", len(raw)) + raw


def _is_pickle(p: bytes) -> bool:
    return p[:1] == b"\x80" and _ops(p) is not None


def pickle_proto(rng: random.Random, p: bytes, pool: Pool) -> bytes | None:
    if not _is_pickle(p):
        return None
    return b"\x80" + bytes([rng.choice([v for v in range(6) if v != p[1]])]) + p[2:]


def pickle_global_form(rng: random.Random, p: bytes, pool: Pool) -> bytes | None:
    """One GLOBAL written as two strings and STACK_GLOBAL, or one STACK_GLOBAL (whose strings are
    pushed just before it) followed by POP POP and the same GLOBAL."""
    ops = _ops(p) if p[:1] == b"\x80" else None
    if not ops:
        return None
    sites: list[tuple[int, int, bytes]] = []
    for i, (name, arg, pos) in enumerate(ops):
        if name == "GLOBAL" and isinstance(arg, str):
            module, attr = arg.split(" ", 1)
            end = ops[i + 1][2] if i + 1 < len(ops) else len(p)
            sites.append((pos, end, _string(module) + _string(attr) + b"\x93"))
        elif name == "STACK_GLOBAL":
            strings = [a for n, a, _ in ops[max(0, i - 4) : i] if n.endswith("UNICODE") and isinstance(a, str)]
            if len(strings) >= 2:
                sites.append((pos, pos + 1, b"00c" + f"{strings[-2]}\n{strings[-1]}\n".encode()))
    if not sites:
        return None
    start, end, new = rng.choice(sites)
    return p[:start] + new + p[end:]


def pickle_py2_module(rng: random.Random, p: bytes, pool: Pool) -> bytes | None:
    """A module renamed to its Python 2 spelling (``__builtin__``, ``UserDict``, ``copy_reg``)."""
    ops = _ops(p) if p[:1] == b"\x80" else None
    if not ops:
        return None
    sites = []
    for i, (name, arg, pos) in enumerate(ops):
        if name == "GLOBAL" and isinstance(arg, str) and arg.split(" ")[0] in PY2_MODULES:
            module, attr = arg.split(" ", 1)
            end = ops[i + 1][2] if i + 1 < len(ops) else len(p)
            sites.append((pos, end, module, lambda m, a=attr: b"c" + f"{m}\n{a}\n".encode()))
        elif name.endswith("UNICODE") and arg in PY2_MODULES and i + 1 < len(ops):
            sites.append((pos, ops[i + 1][2], str(arg), lambda m: _string(m)))
    if not sites:
        return None
    start, end, module, build = rng.choice(sites)
    return p[:start] + build(rng.choice(PY2_MODULES[module])) + p[end:]


def pickle_foreign_global(rng: random.Random, p: bytes, pool: Pool) -> bytes | None:
    """A foreign global reached right after PROTO: called with no argument and dropped, or only
    pushed and dropped. The loader still gets its value."""
    if not _is_pickle(p):
        return None
    if rng.random() < 0.5:
        module, name = rng.choice(FOREIGN_CALLS)
        expr = b"c" + f"{module}\n{name}\n".encode() + b")R0"
    else:
        module, name = rng.choice(FOREIGN_REACH)
        expr = _string(module) + _string(name) + b"\x930"
    return p[:2] + expr + p[2:]


def pickle_noise(rng: random.Random, p: bytes, pool: Pool) -> bytes | None:
    """A stack-neutral pair (``N0``, ``(1``, ``I1\\n0``) between two opcodes."""
    ops = _ops(p) if p[:1] == b"\x80" else None
    if not ops:
        return None
    pos = rng.choice(ops)[2]
    return p[:pos] + rng.choice([b"N0", b"(1", b"I1\n0", b"N0N0"]) + p[pos:]


def in_legacy_pickle(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    """One of the pickles a legacy ``torch.save`` file (or any stream of pickles) starts with."""
    spans, stream = [], io.BytesIO(data)
    while len(spans) < 6 and stream.tell() < len(data) and data[stream.tell() : stream.tell() + 1] == b"\x80":
        start = stream.tell()
        try:
            for _ in pickletools.genops(stream):
                pass
        except Exception:
            break
        spans.append((start, stream.tell()))
    if len(spans) < 2:
        return None
    start, end = rng.choice(spans)
    new = mutate_once(rng, data[start:end], pool, inner=True, kinds=PICKLE)
    return None if new is None else data[:start] + new + data[end:]


# --- bytes ------------------------------------------------------------------------------------


def truncate(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    if len(data) < 2:
        return None
    cut = rng.choice([len(data) - rng.randrange(1, min(64, len(data))), rng.randrange(1, len(data))])
    return data[:cut]


def bit_flip(rng: random.Random, data: bytes, pool: Pool) -> bytes | None:
    if not data:
        return None
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


NPY: dict[str, Mutator] = {
    "npy-header-pad": _npy_edit(_pad),
    "npy-version": _npy_edit(_version),
    "npy-long-suffix": _npy_edit(_long_suffix),
    "npy-shape": _npy_edit(_shape),
    "npy-object-descr": _npy_edit(_object_descr),
    "npy-fortran": _npy_edit(_fortran),
    "npy-body": in_npy_body,
}
PICKLE: dict[str, Mutator] = {
    "pickle-proto": pickle_proto,
    "pickle-global-form": pickle_global_form,
    "pickle-py2-module": pickle_py2_module,
    "pickle-foreign-global": pickle_foreign_global,
    "pickle-noise": pickle_noise,
    "pickle-in-stream": in_legacy_pickle,
}
BYTES: dict[str, Mutator] = {"truncate": truncate, "bit-flip": bit_flip}
MUTATORS: dict[str, Mutator] = {**ZIP, **GZIP, **NPY, **PICKLE, **BYTES}


def mutate_once(
    rng: random.Random, data: bytes, pool: Pool, *, inner: bool = False, kinds: dict[str, Mutator] | None = None
) -> bytes | None:
    """One applicable mutator, picked at random; the chosen names are appended to ``CHAIN``."""
    table = dict(kinds or MUTATORS)
    if inner:
        table.pop("gzip-wrap", None)  # one gzip layer is what trainers write
    names = sorted(table)
    rng.shuffle(names)
    for name in names:
        depth = len(CHAIN)
        CHAIN.append(name)
        try:
            out = table[name](rng, data, pool)
        except (ValueError, struct.error, zlib.error, OverflowError, IndexError, UnicodeError):
            out = None
        if out is not None and out != data:
            return out
        del CHAIN[depth:]
    return None


#: The mutators applied to the mutant being built, in order (``>`` joins them in reports).
CHAIN: list[str] = []


def mutant(rng: random.Random, data: bytes, pool: Pool, steps: int) -> tuple[bytes, str] | None:
    """``steps`` mutations of ``data``: the bytes and the chain, steps joined by `` + ``, a
    descent into a member or stream by ``>`` (``zip-member>npy-shape``)."""
    done = []
    for _ in range(steps):
        CHAIN.clear()
        new = mutate_once(rng, data, pool)
        if new is None:
            break
        data = new
        done.append(">".join(CHAIN))
    return (data, " + ".join(done)) if done else None
