"""What a file or an object looked like when the state database recorded it (:class:`Sig`):
from a ``stat`` on disk, or from a store's listing. Any change to its bytes changes one field."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cachedoctor.stores.interface import ObjectInfo


class Sig(NamedTuple):
    """What a file looked like: any change to its bytes changes one of these."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int


def sig_of(st: os.stat_result) -> Sig:
    return Sig(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def sig_of_info(info: ObjectInfo) -> Sig:
    """The change test of one listed object, from its listing alone: size, LastModified (as
    ``mtime_ns`` and ``ctime_ns``: an object has no separate change time) and the version's
    digest in ``ino``. A store with server versions needs no "racy" rule: a local file can be
    rewritten within one clock tick and keep its size and mtime, so a stat cannot vouch for
    it, but an object cannot be changed in place, and every write gives it a new version."""
    import hashlib  # here: only a store's listing needs it, never a local scan (OpenSSL's import: ms)

    version = int.from_bytes(hashlib.blake2b(info.etag.encode("utf-8"), digest_size=8).digest(), "big") & _SIGNED
    return Sig(info.size, info.mtime_ns, info.mtime_ns, version)


_SIGNED = (1 << 63) - 1  # SQLite integers are signed 64-bit


__all__ = ["Sig", "sig_of", "sig_of_info"]
