"""What cachedoctor needs from a store, whatever holds the cache: list a prefix with the version
of each object, ranged and whole reads that notice a change, writes that replace only the
version read (compare-and-swap), copies, deletes if unchanged, and a create-if-absent (the
lock convention).

Local disks and object stores both implement :class:`Store` (``local.py``, ``s3.py``,
``gcs.py``), so the logic above it is written once. What a store cannot promise it says in its
:class:`Capabilities`, and a caller asks for that, never for a scheme: a file system has no
server-side version (its version is a stat signature), resolves ``..`` and folds ``a//b`` into
``a/b``; an object store has no path a worker process can open.

A remote cache is addressed by URL (``s3://bucket/prefix``), a local one by its absolute path;
everything downstream (scan folders, findings, the state database's keys) sees both as paths.
Only an object-store module imports a network client, and only when a remote target is named:
the core stays free of fsspec and s3fs (the ``[s3]`` extra).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass

from cachedoctor.errors import PathError

#: URL schemes that name a remote target (``connect.py`` maps each to its store module).
SCHEMES = ("s3://", "gs://")


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
        if url.startswith("/") and "://" not in url:  # an absolute local path: the file store
            return cls("file", "", url[1:].rstrip("/") if url != "/" else "")
        scheme, sep, rest = url.partition("://")
        if not sep or not scheme:
            raise RemoteError(url, "not a remote URL; write s3://bucket/prefix or gs://bucket/prefix")
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise RemoteError(url, f"names no bucket; write {scheme}://bucket/prefix")
        return cls(scheme, bucket, key.rstrip("/"))  # (only trailing: a key may begin with "/")

    @property
    def url(self) -> str:
        if self.scheme == "file":
            return f"/{self.key}"
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


class StoreError(PathError):
    """A target that cannot be used at all (a store refuses it, or cannot hold a key): one
    line, exit 2."""


class KeyNotStorable(StoreError):
    """A key this store cannot hold as itself: on a file system ``a//b`` is ``a/b`` and ``..``
    leaves the folder. Callers check :attr:`Capabilities.exact_keys` before relying on such
    keys; a store refuses them rather than silently naming another object."""


class RemoteError(StoreError):
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


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a store promises, asked for by callers instead of its scheme.

    ``server_versions``: an object's ``etag`` is the server's version of its bytes, and the
    conditional requests are enforced by the server for every writer. Without it, ``etag`` is a
    stat signature (size, mtime, inode) and the conditions hold against writers that take the
    same per-file lock (``.<name>.lock``, an exclusive ``flock``), as cooperating trainers do.

    ``exact_keys``: any key is stored as itself (``a//b``, ``..``, a trailing space). Without
    it, keys that a path would rewrite raise :class:`KeyNotStorable`.

    ``local_paths``: an object's URL is a path another process can open and map, so reads may
    go to worker processes (and be killed there); without it they stay on threads here.

    ``links``: an object can be given a second name (:meth:`Store.link`, a hard link) or a new
    one (:meth:`Store.rename`) without its bytes being copied, and a name is looked up at no
    cost. The quarantine keeps a multi-GB file by link or rename then, and looks before it
    links (a resumed run linked it already; a second version goes beside it, ``name.1``);
    without it, a kept object is a server-side copy verified by its HEAD.

    ``appends``: an object can be appended to, each append durable before the next step
    (:meth:`Store.append`, :meth:`Store.sync`). The quarantine writes each record before the file
    it explains is moved then; without it, the records are kept in memory and the records
    object is written whole at the end of each batch.

    ``content_etags``: an ``etag`` is a digest of the bytes (S3's MD5 of a one-request upload),
    so a server-side copy keeps it and equal ETags mean equal bytes. Without it (GCS generation
    numbers, stat signatures) a copy gets a version of its own, and a HEAD tells a faithful
    copy by its size only.
    """

    server_versions: bool
    exact_keys: bool
    local_paths: bool
    links: bool = False
    appends: bool = False
    content_etags: bool = False


class Store(abc.ABC):
    """One namespace of objects: a bucket, or a local file system. Implementations retry throttling (503 SlowDown), connection
    resets and short reads with backoff before raising :class:`TransientError`; they raise
    :class:`ObjectGone` and :class:`ObjectChanged` as soon as the server says so. Methods are
    called from several threads at once."""

    capabilities: Capabilities

    @abc.abstractmethod
    def list(self, prefix: Location) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (recursively, sorted by key), one paginated LIST."""

    def list_folder(self, prefix: Location) -> Iterator[ObjectInfo]:
        """The objects directly under ``prefix`` (``prefix/name``, not ``prefix/sub/name``),
        sorted by key: what a scan re-lists of one folder whose objects changed since an
        inventory listed them. This default filters :meth:`list`; a store whose server can
        stop at the next ``/`` (S3's delimiter) lists only the folder."""
        cut = len(prefix.key) + 1 if prefix.key else 0
        for info in self.list(prefix):
            if "/" not in info.key[cut:]:
                yield info

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

    # -- appended for the quarantine (stores with ``links`` or ``appends`` override them) -------

    def head_entry(self, url: str) -> ObjectInfo | None:
        """:meth:`head`, except that an entry a store keeps as itself rather than as an object
        (a symbolic link that leads nowhere) is described as itself, so that the quarantine
        can keep and restore it. This default: :meth:`head`."""
        return self.head(url)

    def list_entries(self, prefix: Location) -> Iterator[ObjectInfo]:
        """:meth:`list`, with every entry as stored (a symbolic link as the link itself, not
        followed, whether or not it leads anywhere): what a quarantine run holds. This
        default: :meth:`list`."""
        return self.list(prefix)

    def link(self, source: str, target: str, *, sync: bool = True) -> None:
        """Give ``source`` the second name ``target`` (no bytes copied); only where
        :attr:`Capabilities.links`. ``sync=False`` leaves the folder's fsync to the caller."""
        raise NotImplementedError(f"{type(self).__name__} cannot link; check capabilities.links")

    def rename(self, source: str, target: str) -> None:
        """Move ``source`` to ``target`` (replacing it) without copying its bytes; only where
        :attr:`Capabilities.links`. The caller is the only writer of ``target`` (it holds its
        lock): leftovers of an earlier, killed rename to ``target`` are removed."""
        raise NotImplementedError(f"{type(self).__name__} cannot rename; check capabilities.links")

    def append(self, url: str, data: bytes, *, sync: bool = True) -> None:
        """Append ``data`` to the object (created if absent), fsynced unless ``sync=False``
        (then :meth:`sync` makes it durable); only where :attr:`Capabilities.appends`."""
        raise NotImplementedError(f"{type(self).__name__} cannot append; check capabilities.appends")

    def sync(self, url: str) -> None:  # noqa: B027 - optional
        """Make what :meth:`append` wrote to ``url`` with ``sync=False`` durable."""

    def delete_under(self, prefix: Location) -> None:
        """Remove every object under ``prefix`` (a quarantine run restored or purged). This
        default: one LIST, then one DELETE per object."""
        for info in list(self.list(prefix)):
            try:
                self.delete(info.url)
            except ObjectGone:
                continue
