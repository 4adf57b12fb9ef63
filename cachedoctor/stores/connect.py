"""Open the store a remote URL names, once per bucket per process, with the run's settings.

The scheme picks the member (an absolute path -> ``local.py``, ``s3://`` -> ``s3.py``, ``gs://`` ->
``gcs.py``); a scheme with no member, or a member whose extra is not installed, is a
:class:`RemoteError` naming the URL and what to install. The S3 settings (endpoint, profile,
keys) are S3's: a ``gs://`` store takes Google's chain and ``STORAGE_EMULATOR_HOST`` instead.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cachedoctor.stores.interface import Capabilities, Location, RemoteError, Store, is_remote
from cachedoctor.stores.s3_settings import S3Settings  # the store modules (asyncio, ssl): when opened

if TYPE_CHECKING:
    from cachedoctor.stores.retrying import RetryPolicy

_stores: dict[tuple[str, str, S3Settings], Store] = {}
_lock = threading.Lock()


def store_for(url: str, settings: S3Settings | None = None, policy: RetryPolicy | None = None) -> Store:
    """The store holding ``url`` (shared by every caller with the same settings)."""
    location = Location.parse(url)
    if location.scheme == "file":
        return local_store()
    settings = settings or S3Settings()
    if location.scheme not in ("s3", "gs"):
        raise RemoteError(url, f"no support for {location.scheme}:// yet; cachedoctor reads s3:// and gs:// URLs")
    key = (location.scheme, location.bucket, settings if location.scheme == "s3" else S3Settings())
    with _lock:
        store = _stores.get(key)
        if store is None or policy is not None:
            store = _open(location, settings, policy)
            _stores[key] = store
        return store


def _open(location: Location, settings: S3Settings, policy: RetryPolicy | None) -> Store:
    if location.scheme == "gs":
        from cachedoctor.stores.gcs import GCSStore

        return GCSStore(location.bucket, policy)
    from cachedoctor.stores.s3 import S3Store

    return S3Store(location.bucket, settings, policy)


def capabilities_of(target: str) -> Capabilities:
    """What the store holding ``target`` (a path or a URL) promises, from its member alone:
    nothing is opened, nothing is sent, no extra is needed. Callers choose by this, never by
    the scheme."""
    if not is_remote(target):
        from cachedoctor.stores.local import LocalStore

        return LocalStore.capabilities
    scheme = Location.parse(target).scheme
    if scheme == "gs":
        from cachedoctor.stores.gcs import GCSStore

        return GCSStore.capabilities
    if scheme != "s3":
        raise RemoteError(target, f"no support for {scheme}:// yet; cachedoctor reads s3:// and gs:// URLs")
    from cachedoctor.stores.s3 import S3Store

    return S3Store.capabilities


def files_here(target: str) -> bool:
    """Whether ``target``'s objects are files this machine opens by path (``local_paths``)."""
    return capabilities_of(target).local_paths


def local_store() -> Store:
    """The one local-disk store (it keeps no connection, so every caller shares it)."""
    global _local
    if _local is None:
        from cachedoctor.stores.local import LocalStore

        _local = LocalStore()
    return _local


_local: Store | None = None


def forget() -> None:
    """Drop every open store (tests that restart the server; the end of a run)."""
    with _lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
