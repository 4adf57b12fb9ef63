"""Hash-flood detection for the static pickle walk: keys that a loader would hash into one bucket.

A dict or set whose keys all share one hash costs its builder quadratic time: each insertion
compares the new key with every key already in the chain. Python's hashes of ``str`` and
``bytes`` are salted per process, so a file cannot aim at them; the hashes of ``int``,
``float``, ``complex`` and tuples of them are fixed (``hash(n)`` is ``n mod (2**61 - 1)``), so
240,000 multiples of ``2**61 - 1`` all hash to 0, stay under every walk limit, and keep
``torch.load`` busy for minutes. The walk therefore counts, per hash value, the *distinct* keys
that would be inserted; more than :data:`~cachedoctor.formats._pickle_policy.Limits.hash_collisions`
in one bucket is a resource bomb. Keys whose hash the walk cannot compute (the result of a call)
are counted against a cap of their own.

The table is keyed by the hash itself (an ``int``, whose own hash is itself, so distinct hashes
never collide in our table) and holds the first key seen: collisions are compared by value
against a short list, so this check cannot be flooded in turn.
"""

from __future__ import annotations

from cachedoctor.formats._pickle_opcodes import Bomb

#: Values whose hash a file can aim; ``bool`` is an ``int`` but has two values only.
_FIXED_HASH = (int, float, complex, tuple)


class HashFlood:
    __slots__ = ("first", "crowded", "opaque", "limit", "opaque_limit")

    def __init__(self, limit: int, opaque_limit: int) -> None:
        self.first: dict[int, object] = {}  # hash -> the first distinct key seen with it
        self.crowded: dict[int, list[object]] = {}  # hash -> every distinct key, once two collide
        self.opaque = 0
        self.limit = limit
        self.opaque_limit = opaque_limit

    def key(self, key: object, known: bool) -> None:
        """One key a loader would insert into a dict or set; ``known`` says the walk knows its
        value (a constant, a tuple of constants), not only that it is the result of a call."""
        if not known:
            self.opaque += 1
            if self.opaque > self.opaque_limit:
                raise Bomb(f"more than {self.opaque_limit:,} dict or set keys built by calls or frozensets")
            return
        if not isinstance(key, _FIXED_HASH) or isinstance(key, bool):
            return  # str and bytes hashes are salted; None, bools and stand-ins are few or by id
        try:
            h = hash(key)
        except TypeError:  # a tuple holding a list: the loader raises before hashing anything
            return
        seen = self.first.get(h, _ABSENT)
        if seen is _ABSENT:
            self.first[h] = key
            return
        if _same(seen, key):
            return
        chain = self.crowded.get(h)
        if chain is None:
            chain = self.crowded[h] = [seen]
        if any(_same(other, key) for other in chain):
            return
        chain.append(key)
        if len(chain) > self.limit:
            raise Bomb(
                f"more than {self.limit:,} distinct dict or set keys with one hash ({h}): "
                "a hash flood, quadratic to build"
            )


_ABSENT = object()


def _same(a: object, b: object) -> bool:
    """Equal as dict keys (``1 == 1.0``); a comparison that raises counts as distinct."""
    try:
        return bool(a == b)
    except Exception:
        return False
