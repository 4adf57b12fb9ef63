"""The state database of a remote target, and what a remote folder's scan must read.

A remote cache keeps its state database on this machine, not in the bucket (writing to a
bucket that is only scanned would need write access and would race other readers): under the
user cache dir (``$XDG_CACHE_HOME`` or ``~/.cache``), ``cachedoctor/remote/<scheme>/<bucket>/
<short hash of the prefix>.sqlite``, unless ``--state PATH`` names one or ``--no-state`` none.

Rows are the local ones (``state/store.py``), keyed by the object's key relative to its folder,
with a :class:`~cachedoctor.scan.state.store.Sig` built from the listing: size, LastModified
(as ``mtime_ns`` and ``ctime_ns``: an object has no separate change time) and the ETag's
digest in ``ino``. That is the whole change test, and it needs no "racy" rule: a local file
can be rewritten within one clock tick and keep its size and mtime, so a stat cannot vouch
for it; an object cannot be changed in place at all, and every PUT gives it a new ETag (the
MD5 of its bytes, or of its parts), so an equal ETag with an equal size is the same bytes,
whenever it was written.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from cachedoctor.scan.state.plan import FolderPlan, plan_rows
from cachedoctor.scan.state.store import Sig, StateStore
from cachedoctor.stores.interface import Location, ObjectInfo

_ETAG_BITS = (1 << 63) - 1  # SQLite integers are signed 64-bit


def cache_home(environ: Mapping[str, str] | None = None) -> str:
    """The user cache dir (XDG): ``$XDG_CACHE_HOME``, or ``~/.cache``."""
    env = os.environ if environ is None else environ
    home = env.get("XDG_CACHE_HOME", "").strip()
    return home if os.path.isabs(home) else os.path.join(os.path.expanduser("~"), ".cache")


def remote_state_path(url: str, environ: Mapping[str, str] | None = None) -> str:
    """Where the state database of the remote prefix ``url`` lives by default."""
    location = Location.parse(url)
    digest = hashlib.sha256(location.key.encode("utf-8")).hexdigest()[:16]
    return os.path.join(
        cache_home(environ), "cachedoctor", "remote", location.scheme, location.bucket, f"{digest}.sqlite"
    )


def remote_sig(info: ObjectInfo) -> Sig:
    """The change test of one object (see the module's docstring)."""
    etag = int.from_bytes(hashlib.blake2b(info.etag.encode("utf-8"), digest_size=8).digest(), "big") & _ETAG_BITS
    return Sig(info.size, info.mtime_ns, info.mtime_ns, etag)


def plan_remote_folder(
    store: StateStore,
    folder: str,
    infos: list[ObjectInfo],
    *,
    deep: bool,
    deep_changed: bool,
    whole: bool = True,
) -> tuple[FolderPlan, str | None]:
    """:func:`~cachedoctor.scan.state.plan.plan_folder` of a remote folder, from its listing: no
    request at all. The listing's digest (names, sizes, LastModified, ETags) finds a settled
    folder's recorded result in one query."""
    import xxhash

    cut = len(folder) + 1
    sigs = [remote_sig(info) for info in infos]
    hasher = xxhash.xxh3_128()
    for info, sig in zip(infos, sigs, strict=True):
        hasher.update(f"{info.url[cut:]}\0{sig.size}\0{sig.mtime_ns}\0{sig.ino}\0".encode("utf-8", "surrogateescape"))
    digest = hasher.hexdigest()
    if whole and not deep:
        result = store.folder_result(folder, digest)
        if result is not None:
            return FolderPlan(digest=digest), result
    files = [info.url for info in infos]
    return plan_rows(store, folder, files, list(sigs), digest, deep=deep, deep_changed=deep_changed, chosen=set()), None


__all__ = ["cache_home", "plan_remote_folder", "remote_sig", "remote_state_path"]
