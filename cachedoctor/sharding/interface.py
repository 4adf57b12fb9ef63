"""A shard: ``K`` of ``N`` deterministic shares of a cache, cut by folder.

The folder is the unit because everything a scan judges beyond one file is judged per folder:
peer checks compare a folder's files with each other, the dataset pairs a folder's expected
entries with its files, and the state database records a folder's result whole. So a shard
owns whole folders, chosen by a hash of the folder's path (a local path, or a URL's folder as
its listing spells it) that depends on nothing else: the same folder falls to the same shard
on every run with the same ``N``, whatever else was added, so each shard's state stays warm.
Every node must name the cache by the same path (as every rank of a ``torchrun`` job already
does: it is the same command line).

The cost of the rule: a cache of one flat folder is one shard's work, and a few huge folders
split as unevenly as their count allows (docs/performance.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cachedoctor.errors import UsageError

MAX_SHARDS = 65_536


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` (0-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS or not 0 <= self.index < self.count:
            raise UsageError(f"--shard {self.index}/{self.count}: K/N needs 0 <= K < N <= {MAX_SHARDS}")

    @property
    def text(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def whole(self) -> bool:
        """One shard of one: the whole cache."""
        return self.count == 1

    def owns(self, folder: str) -> bool:
        """Whether this shard scans ``folder`` (and settles the dataset entries expected in it)."""
        return self.count == 1 or shard_of(folder, self.count) == self.index


def shard_of(folder: str, count: int) -> int:
    """The shard of ``count`` that owns ``folder``: a hash of its path as bytes (names need not
    be UTF-8), never Python's ``hash`` (salted per process)."""
    import hashlib  # here: one shard of one (every plain scan) never hashes

    digest = hashlib.blake2b(os.fsencode(folder.rstrip("/") or "/"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def parse_shard(text: str) -> Shard:
    """``"K/N"`` as typed after ``--shard`` (0-based ``K``: ``0/4`` .. ``3/4``)."""
    index, sep, count = text.strip().partition("/")
    if not sep or not index.strip().isdigit() or not count.strip().isdigit():
        raise UsageError(f"--shard {text}: give K/N, this shard's number and the number of shards (0/4 .. 3/4)")
    return Shard(int(index), int(count))


__all__ = ["MAX_SHARDS", "Shard", "parse_shard", "shard_of"]
