"""What cachedoctor needs from an object store, whatever its protocol: list, ranged and whole
reads that notice a change, one-request writes, server-side copies, and a create-if-absent.

A remote cache is addressed by URL (``s3://bucket/prefix``); everything downstream (scan
folders, findings, the state database's keys) sees those URLs as paths. Only a store module
(``s3.py``, later other fsspec protocols) imports a network client, and only when a remote
target is named: the core stays free of fsspec and s3fs (the ``[s3]`` extra).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass

from cachedoctor.errors import PathError

#: URL schemes that name a remote target, and the store module that serves each.
SCHEMES = ("s3://",)


def is_remote(target: str) -> bool:
    """Whether ``target`` names an object-store location rather than a local path."""
    return target.startswith(SCHEMES)


@dataclass(frozen=True, slots=True)
class Location:
    """``s3://bucket/prefix`` split: the scheme (``s3``), the bucket and the key prefix (no
    leading ``/``; ``""`` for the whole bucket)."""

    scheme: str
    bucket: str
    key: str

    @classmethod
    def parse(cls, url: str) -> Location:
        scheme, sep, rest = url.partition("://")
        if not sep or not scheme:
            raise RemoteError(url, "not a remote URL; write s3://bucket/prefix")
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise RemoteError(url, "names no bucket; write s3://bucket/prefix")
        return cls(scheme, bucket, key.strip("/") if key.endswith("/") else key)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    def child(self, key: str) -> Location:
        return Location(self.scheme, self.bucket, key)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object as a listing or a HEAD saw it: what a scan's change test compares (the remote
    twin of a local file's stat: any new write changes the ETag or LastModified)."""

    url: str
    size: int
    etag: str  # as the server sends it, quotes stripped
    mtime_ns: int  # LastModified, in nanoseconds since the epoch

    @property
    def key(self) -> str:
        return Location.parse(self.url).key


class RemoteError(PathError):
    """A remote target that cannot be used at all: no credentials, refused credentials, no such
    bucket, the ``[s3]`` extra not installed, the endpoint unreachable. One line, exit 2."""


class ObjectGone(Exception):
    """The object was listed but is no longer there (deleted or renamed since): skipped, like a
    local file that vanished between the walk and the read."""


class ObjectChanged(Exception):
    """The object's ETag is no longer the one listed (rewritten since the listing or during the
    read): read again once from a fresh HEAD, then reported."""


class TransientError(Exception):
    """A request that still failed after the store's retries (throttling, resets, short reads):
    the object is reported unreadable for this scan, not judged."""


class ObjectStore(abc.ABC):
    """One bucket-like namespace. Implementations retry throttling (503 SlowDown), connection
    resets and short reads with backoff before raising :class:`TransientError`; they raise
    :class:`ObjectGone` and :class:`ObjectChanged` as soon as the server says so. Methods are
    called from several threads at once."""

    @abc.abstractmethod
    def list(self, prefix: Location) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (recursively, sorted by key), one paginated LIST."""

    @abc.abstractmethod
    def head(self, url: str) -> ObjectInfo | None:
        """The object's current facts, or ``None`` when it does not exist."""

    @abc.abstractmethod
    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object as ``info`` describes it (the request is
        conditional on its ETag). Short only where the object itself is shorter."""

    @abc.abstractmethod
    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        """The whole object (conditional on ``info.etag``), streamed; more than ``limit`` bytes
        is :class:`ObjectChanged` (the object is not the one listed)."""

    @abc.abstractmethod
    def put(self, url: str, data: bytes) -> ObjectInfo:
        """Replace or create the object in one request (readers see the old or the new bytes)."""

    @abc.abstractmethod
    def put_if_absent(self, url: str, data: bytes) -> bool:
        """Create the object only if no object has that key (``If-None-Match: *``); ``False``
        when one exists already. The lock convention of repairs on one prefix."""

    @abc.abstractmethod
    def copy(self, source: ObjectInfo, target: str) -> ObjectInfo:
        """Server-side copy of ``source`` (conditional on its ETag) to ``target``."""

    @abc.abstractmethod
    def delete(self, url: str) -> None:
        """Remove one object (lock objects, and objects already copied to the quarantine)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""

    def cancel_all(self) -> None:  # noqa: B027 - optional
        """Abandon every request in flight (their callers get :class:`TransientError`): a scan
        that has stopped waiting for a stalled object does not wait for its thread either."""

    # -- appended for repair (conditional writes; a store without them falls back) ------------

    def put_if_match(self, url: str, data: bytes, etag: str) -> ObjectInfo:
        """Replace the object only if its ETag is still ``etag`` (``If-Match``): a write by
        someone else since it was read is :class:`ObjectChanged`, not overwritten. One request:
        the size and ETag returned are the written ones, ``mtime_ns`` only about now. This
        default cannot tell, and writes unconditionally."""
        return self.put(url, data)

    def delete_if_match(self, url: str, etag: str) -> None:
        """Delete the object only if its ETag is still ``etag``, else :class:`ObjectChanged`.
        This default cannot tell, and deletes unconditionally."""
        self.delete(url)
