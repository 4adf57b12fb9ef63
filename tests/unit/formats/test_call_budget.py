"""The static walk's budgets for allowed callables, its hash-flood check and its protocol rule for
Python-2 names, each checked against what the real unpickler or codec machinery does."""

from __future__ import annotations

import codecs
import io
import pickle
import struct

import pytest

from cachedoctor.formats._call_budget import _STORAGES, _VALUES, linear_codec
from cachedoctor.formats._hash_flood import HashFlood
from cachedoctor.formats._pickle_opcodes import Bomb
from cachedoctor.formats._pickle_policy import Limits
from cachedoctor.formats._pickle_scan import scan
from cachedoctor.formats._unpickle import Opaque, Refused, RestrictedUnpickler
from cachedoctor.formats._verdict import screen_sequence
from cachedoctor.formats.interface import ReadError

M61 = 2**61 - 1
BYTEARRAY = b"cbuiltins\nbytearray\n"


def long1(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


# --- codecs: the linear set, by every name codecs.lookup resolves to it ------------------------

NAMES = [
    "utf-8", "UTF8", "utf_8", "U8", " utf  8 ", "cp65001", "latin1", "ISO-8859-1", "L1", "latin-1",
    "ascii", "US-ASCII", "646", "punycode", "rot13", "zlib", "base64", "utf-16", "idna", "utf-7",
    "hex", "bz2", "raw_unicode_escape", "cp1252",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_codec_names_resolve_as_codecs_lookup_does(name: str) -> None:
    linear = codecs.lookup(name).name in ("utf-8", "iso8859-1", "ascii")
    assert (linear_codec(name) is not None) == linear


def test_an_unknown_codec_name_is_not_linear() -> None:
    assert linear_codec("no-such-codec") is None
    assert linear_codec(b"utf-8") is None  # not a str: the loader raises, the walk refuses


# --- which allowed names are values, which are storages: as torch has them ------------------


def test_allowed_values_are_not_callable_and_storages_are_classes() -> None:
    torch = pytest.importorskip("torch")
    for name in _VALUES:
        value = getattr(torch, name.split(".", 1)[1], None)
        assert value is None or not callable(value), name
    for name in _STORAGES:
        if name.startswith("torch.cuda.") or name.startswith("torch.storage."):
            continue
        cls = getattr(torch, name.split(".", 1)[1], None)
        assert cls is None or isinstance(cls, type), name


# --- the protocol rule ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "mapped"),
    [(b"", True), (b"\x80\x01", True), (b"\x80\x02", True), (b"\x80\x03", False), (b"\x80\x02\x80\x04", False)],
)
def test_python2_names_map_only_below_protocol_3(head: bytes, mapped: bool) -> None:
    """The C unpickler maps ``__builtin__.set`` by the last PROTO read; from 3 on it imports
    ``__builtin__`` (absent here: ModuleNotFoundError). The walk agrees."""
    data = head + b"c__builtin__\nset\n)R."
    if mapped:
        assert pickle.loads(data) == set()
        assert scan(data).unsafe == ()
    else:
        with pytest.raises(ModuleNotFoundError):
            pickle.loads(data)
        assert scan(data).unsafe == ("__builtin__.set",)


# --- budgets --------------------------------------------------------------------------------


def test_bytearray_size_is_counted_not_allocated() -> None:
    result = scan(b"\x80\x02" + BYTEARRAY + long1(1 << 20) + b"\x85R.")
    assert (result.complete, result.bomb, result.allocated) == (True, None, 1 << 20)


def test_memo_reuse_is_counted_at_each_use() -> None:
    value = b"B" + struct.pack("<I", 1 << 20) + b"\0" * (1 << 20)
    one = b"h\x00h\x01\x85R"
    data = b"\x80\x04" + BYTEARRAY + b"\x94" + b"0" + value + b"\x94" + b"0" + b"](" + one * 70 + b"e."
    result = scan(data)
    assert result.bomb is not None and "with the calls before it" in result.bomb


def test_one_budget_for_the_pickles_of_a_file() -> None:
    one = b"\x80\x02" + BYTEARRAY + long1(40 << 20) + b"\x85R."
    with pytest.raises(ReadError) as exc:
        screen_sequence(one + one, 2, "legacy torch file")
    assert exc.value.problem == "resource-bomb"


def test_a_storage_class_called_cannot_be_shown_safe() -> None:
    data = b"\x80\x02ctorch\nFloatStorage\nK\x10\x85R."
    assert any("torch.FloatStorage called" in name for name in scan(data).unsafe)


def test_build_on_an_imported_class_cannot_be_shown_safe() -> None:
    data = b"\x80\x02ccollections\nOrderedDict\nN}\x86b."
    assert any("BUILD on collections.OrderedDict" in name for name in scan(data).unsafe)


def test_tensor_rebuild_through_from_type_calls_its_function() -> None:
    call = b"ctorch._tensor\n_rebuild_from_type_v2\n(" + BYTEARRAY + b"ctorch\nTensor\n" + long1(6 << 30) + b"\x85}tR."
    assert "would allocate" in (scan(b"\x80\x02" + call).bomb or "")


# --- hash floods ------------------------------------------------------------------------------


def test_hash_flood_counts_distinct_keys_per_hash() -> None:
    flood = HashFlood(limit=3, opaque_limit=10)
    for key in (0, 0, 0.0, M61, M61, 2 * M61, -1, -2, "a", "a"):
        flood.key(key, known=True)  # 0 == 0.0; -1 and -2 share a hash: two chains of 3 and 2
    with pytest.raises(Bomb):
        flood.key(3 * M61, known=True)


def test_keys_of_unknown_hash_are_capped() -> None:
    flood = HashFlood(limit=3, opaque_limit=2)
    flood.key(object(), known=False)
    flood.key(object(), known=False)
    with pytest.raises(Bomb):
        flood.key(object(), known=False)


def test_colliding_tuple_keys_are_a_flood() -> None:
    keys = b"".join(b"(" + long1(k * M61) + b"K\x01t" + b"N" for k in range(1, 80))
    data = b"\x80\x02}(" + keys + b"u."
    assert "one hash" in (scan(data).bomb or "")


# --- the restricted unpickler keeps its own memory small ---------------------------------------


def test_restricted_unpickler_copies_at_most_a_mebibyte() -> None:
    value = b"B" + struct.pack("<I", 600_000) + b"\0" * 600_000
    data = b"\x80\x04" + BYTEARRAY + b"\x94" + b"0" + value + b"\x94" + b"0" + b"](" + b"h\x00h\x01\x85R" * 3 + b"e."
    result = RestrictedUnpickler(data).load()
    assert isinstance(result[0], bytearray) and all(isinstance(r, Opaque) for r in result[1:])


def test_restricted_unpickler_refuses_a_codec_outside_the_linear_set() -> None:
    data = b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x08\x00\x00\x00punycode\x86R."
    with pytest.raises(Refused):
        RestrictedUnpickler(io.BytesIO(data)).load()


def test_keyword_arguments_cannot_be_shown_safe() -> None:
    """NEWOBJ_EX's keywords: torch.Tensor(cdata=...) is a tensor at a pointer; empty ones are fine."""
    kwargs = b"}(X\x05\x00\x00\x00cdata" + long1(0x414141414141) + b"u"
    assert any("keyword arguments cdata" in n for n in scan(b"\x80\x04ctorch\nTensor\n)" + kwargs + b"\x92.").unsafe)
    assert scan(b"\x80\x04ccollections\nOrderedDict\n)}\x92.").unsafe == ()


def test_frozenset_keys_count_as_keys_of_unknown_hash() -> None:
    """A frozenset's hash mixes its items' hashes: the walk does not compute it, it counts it."""
    keys = b"".join(b"(" + long1(k) + b"\x91N" for k in range(3))  # FROZENSET, value None
    data = b"\x80\x04}(" + keys + b"u."
    assert scan(data, limits=Limits(opaque_keys=3)).bomb is None
    assert "built by calls" in (scan(data, limits=Limits(opaque_keys=2)).bomb or "")
