"""Where a scan's state database lives unless ``--state`` says: inside a local cache root, or,
for a store whose objects are not local files, in the user cache folder on this machine."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from cachedoctor.statedir import sharded_path, state_db_path
from cachedoctor.stores.interface import Location, is_remote

if TYPE_CHECKING:
    from cachedoctor.sharding.interface import Shard


def default_path(root: str, environ: Mapping[str, str] | None = None, shard: Shard | None = None) -> str:
    """The state database a scan of ``root`` uses unless told otherwise: inside a local root
    (``statedir.py``); for a store whose objects are not local files, on this machine, not in
    the bucket (writing to a bucket that is only scanned would need write access and would race
    other readers), under the user cache dir (``$XDG_CACHE_HOME`` or ``~/.cache``):
    ``cachedoctor/remote/<scheme>/<bucket>/<short hash of the prefix>.sqlite``. With ``shard``
    K of N, shard K's own: ``.shard-K-of-N`` before the suffix (``statedir.sharded_path``)."""
    if not is_remote(root):
        return state_db_path(root, shard)
    import hashlib  # here: a local scan never needs it (OpenSSL's import is a few ms of every run)

    location = Location.parse(root)
    digest = hashlib.sha256(location.key.encode("utf-8")).hexdigest()[:16]
    folder = os.path.join(cache_home(environ), "cachedoctor", "remote", location.scheme, location.bucket)
    return sharded_path(os.path.join(folder, f"{digest}.sqlite"), shard)


def cache_home(environ: Mapping[str, str] | None = None) -> str:
    """The user cache dir (XDG): ``$XDG_CACHE_HOME``, or ``~/.cache``."""
    env = os.environ if environ is None else environ
    home = env.get("XDG_CACHE_HOME", "").strip()
    return home if os.path.isabs(home) else os.path.join(os.path.expanduser("~"), ".cache")


__all__ = ["cache_home", "default_path"]
