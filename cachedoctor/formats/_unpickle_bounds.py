"""The bounds the restricted unpickler (``_unpickle.py``) keeps while it describes a pickle: what
a traversal of shared references would unfold into, how much it copies for real, how it formats
hostile objects, and the exceptions that say a limit was passed or a call refused. Both exceptions
are :class:`PickleBomb`: a reader reports them as unsafe-pickle, never as damage.
"""

from __future__ import annotations

import pickle
import reprlib
from typing import Any

from cachedoctor.formats._call_budget import linear_codec

#: Objects a recursive traversal of the result may visit, shared references counted each time
#: they are reached: a DAG of 60 tuples, each holding the next one twice, unfolds into 2^60.
_MAX_UNFOLDED = 1_000_000


class PickleBomb(pickle.UnpicklingError):
    """The object is past a limit no cache file comes near; ``args[0]`` says which."""


def unfolded_size(obj: Any, limit: int = _MAX_UNFOLDED) -> int:
    """How many containers a naive recursive walk (``repr``, ``str``, a tree map) visits, up to
    ``limit + 1``; O(distinct nodes), and a cycle counts as past the limit."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(obj, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            total = 1 + sum(sizes.get(id(c), 1) for c in children if isinstance(c, (dict, list, tuple)))
            sizes[key] = min(total, limit + 1)
            continue
        if key in sizes:
            if sizes[key] < 0:  # reached again while its own children are open: a cycle
                return limit + 1
            continue
        sizes[key] = -1
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list, tuple)) and sizes.get(id(c)) != 0)
    return sizes.get(id(obj), 1) if isinstance(obj, (dict, list, tuple)) else 1


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [*node.keys(), *node.values()]
    if isinstance(node, (list, tuple)):
        return list(node)
    return []


def refuse_unfolding(value: Any, what: str) -> None:
    if unfolded_size(value) > _MAX_UNFOLDED:
        raise PickleBomb(f"{what} whose shared references unfold into more than {_MAX_UNFOLDED:,} objects")


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxtuple, _SHORT.maxlist, _SHORT.maxdict = 2, 4, 4, 4
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 24, 24, 24


def short(value: Any) -> str:
    """A repr of a hostile object in bounded time and length (a DAG's full repr is exponential)."""
    try:
        return _SHORT.repr(value)[:80]
    except Exception:  # a stand-in's repr cannot fail, but be certain
        return f"<{type(value).__name__}>"


class Opaque:
    """Stands in for a global outside the allow-list and everything built from it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Opaque:
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


class Refused(PickleBomb):
    """A call the restricted unpickler will not make for the file ("cannot be shown safe: ...");
    a :class:`PickleBomb`, so that readers report it as unsafe-pickle, never as damage."""


#: Bytes the stand-ins below copy for real, per unpickler: a cache's ``bytes`` values are small;
#: past this they stand in as inert objects (the static walk already bounds what a loader would
#: allocate, ``Limits.call_bytes``; this bound keeps *our* memory small whatever it allowed).
_MATERIALISED = 1 << 20


class _Copies:
    """The bytes-making stand-ins of one unpickler, sharing its materialisation budget."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = _MATERIALISED

    def _take(self, size: int, what: str) -> bool:
        if size > self.left:
            return False
        self.left -= size
        return True

    def encode(self, text: Any, encoding: Any = "utf-8", errors: Any = "strict", *rest: Any) -> Any:
        """``_codecs.encode``: protocol-2 pickles (torch's default) spell ``bytes`` this way."""
        if linear_codec(encoding) is None:
            raise Refused(f"cannot be shown safe: _codecs.encode with codec {short(encoding)}")
        if not isinstance(text, str) or errors != "strict":
            raise pickle.UnpicklingError("_codecs.encode of something other than a str, or with an error handler")
        if not self._take(len(text) * 4, "_codecs.encode"):
            return Opaque(f"bytes of {len(text):,} characters, not copied")
        return text.encode(encoding)

    def bytearray(self, value: Any = b"", *rest: Any) -> Any:
        """``bytearray(n)`` would allocate n bytes: only copies of bytes the pickle already holds,
        and only while they are small."""
        if not isinstance(value, (bytes, bytearray)):
            if isinstance(value, Opaque):
                return value
            raise pickle.UnpicklingError("bytearray from something other than bytes")
        if not self._take(len(value), "bytearray"):
            return Opaque(f"bytearray of {len(value):,} bytes, not copied")
        return bytearray(value)
