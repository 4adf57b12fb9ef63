"""The local-disk member of the store family: a file system seen through :class:`Store`.

A file system has no server-side version and no conditional request, so this store makes them:

* an object's version (``ObjectInfo.etag``) is its stat signature, size, mtime and inode, which
  every rewrite changes (an in-place write moves the mtime, a rename brings a new inode);
* a read opens the file, compares the open descriptor's signature with the one listed
  (:class:`ObjectChanged` if it moved) and reads through that descriptor, so bytes of two
  versions never mix even if the path is replaced during the read;
* a write goes to an ``O_EXCL`` temporary beside the target, is fsynced, and is renamed over it
  (readers see the old or the new bytes, never a half), then the folder is fsynced;
* compare-and-swap (:meth:`put_if_match`, :meth:`delete_if_match`) holds the per-file lock
  (an exclusive ``flock`` on ``.<name>.lock``, the convention ``file_locks.py`` documents for
  cooperating trainers) while it checks the signature and renames: it excludes every writer
  that takes the same lock, which a server's ``If-Match`` would exclude all of;
* create-if-absent is ``link(2)`` of a written temporary, which fails if the name exists;
* the quarantine's operations (``links``, ``appends``): a file is kept by hard link and moved
  by rename (``atomic.transfer``: across file systems a fsynced copy), a symbolic link that
  leads nowhere as the link itself, and records are appended to and fsynced.

Keys are paths, so ``a//b`` and ``..`` cannot be stored as themselves: they raise
:class:`KeyNotStorable` (``capabilities.exact_keys`` is false) instead of naming another file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator

from cachedoctor.atomic import fsync_dir
from cachedoctor.statedir import is_lock_name
from cachedoctor.stores.interface import (
    Capabilities,
    Location,
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    Store,
    StoreError,
    TransientError,
)
from cachedoctor.stores.local_links import STORE_TEMP, LocalLinks
from cachedoctor.stores.local_paths import checked_path, file_info, signature

_TEMP = STORE_TEMP
_CHUNK = 1 << 20


class LocalStore(LocalLinks, Store):
    """The files under ``/`` (one instance serves every local target)."""

    capabilities = Capabilities(server_versions=False, exact_keys=False, local_paths=True, links=True, appends=True)

    def list(self, prefix: Location) -> Iterator[ObjectInfo]:
        """Every regular file under ``prefix``, in the order of their keys' UTF-8 bytes (an
        object store's LIST order), the store's own temporaries and lock files left out.
        Symbolic links to files are listed as the files they name; linked folders are not
        entered (a loop would never end)."""
        root = prefix.url
        try:
            st = os.stat(root)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(root, f"cannot be listed ({exc.strerror}); check the path and its permissions") from None
        if stat.S_ISREG(st.st_mode):
            yield file_info(root, st)
            return
        yield from self._walk(root)

    def _walk(self, folder: str) -> Iterator[ObjectInfo]:
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(folder, f"cannot be listed ({exc.strerror}); check its permissions") from None
        keyed = []
        for entry in entries:
            if entry.name.startswith(_TEMP) or is_lock_name(entry.name):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            keyed.append(
                ((entry.name + "/" if is_dir else entry.name).encode("utf-8", "surrogateescape"), entry, is_dir)
            )
        keyed.sort(key=lambda item: item[0])
        for _, entry, is_dir in keyed:
            if is_dir:
                yield from self._walk(entry.path)
                continue
            try:
                st = os.stat(entry.path)
            except OSError:
                continue  # gone since, or a dangling link: nothing to read
            if stat.S_ISREG(st.st_mode):
                yield file_info(entry.path, st)

    def head(self, url: str) -> ObjectInfo | None:
        path = checked_path(url)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return file_info(path, st) if stat.S_ISREG(st.st_mode) else None

    @contextlib.contextmanager
    def _open(self, info: ObjectInfo) -> Iterator[int]:
        """A descriptor of exactly the version ``info`` names."""
        try:
            fd = os.open(checked_path(info.url), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectGone(info.url) from None
        try:
            if info.etag and signature(os.fstat(fd)) != info.etag:
                raise ObjectChanged(info.url)
            yield fd
        finally:
            os.close(fd)

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        end = min(end, info.size)
        if end <= start:
            return b""
        with self._open(info) as fd:
            return os.pread(fd, end - start, start)

    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        if info.size > limit:
            raise ObjectChanged(info.url)
        with self._open(info) as fd:
            data = os.pread(fd, info.size + 1, 0)
        if len(data) != info.size:
            raise ObjectChanged(info.url)
        return data

    def _temp(self, path: str, data: bytes | None, source: ObjectInfo | None = None) -> str:
        """A fsynced temporary beside ``path`` holding ``data`` (or ``source``'s bytes)."""
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise StoreError(folder, f"cannot be created ({exc.strerror}); check the permissions") from None
        temp = os.path.join(folder, f"{_TEMP}{os.getpid()}-{secrets.token_hex(6)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            if source is not None:
                with self._open(source) as src:
                    offset = 0
                    while offset < source.size:
                        chunk = os.pread(src, min(_CHUNK, source.size - offset), offset)
                        if not chunk:
                            raise ObjectChanged(source.url)
                        os.write(fd, chunk)
                        offset += len(chunk)
            elif data:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(temp)
            raise
        os.close(fd)
        return temp

    def _publish(self, temp: str, path: str) -> ObjectInfo:
        try:
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        fsync_dir(os.path.dirname(path))
        return file_info(path, os.stat(path))

    def put(self, url: str, data: bytes) -> ObjectInfo:
        path = checked_path(url)
        return self._publish(self._temp(path, data), path)

    def put_if_absent(self, url: str, data: bytes) -> bool:
        path = checked_path(url)
        temp = self._temp(path, data)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(temp)
        fsync_dir(os.path.dirname(path))
        return True

    def copy(self, source: ObjectInfo, target: str) -> ObjectInfo:
        path = checked_path(target)
        return self._publish(self._temp(path, None, source), path)

    def delete(self, url: str) -> None:
        path = checked_path(url)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        fsync_dir(os.path.dirname(path))

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """The per-file lock of cooperating writers (``file_locks.held``), held for one
        compare-and-swap; a writer that keeps it past the lock's timeout fails this request."""
        from filelock import Timeout

        from cachedoctor.file_locks import LOCK_TIMEOUT_S, held

        try:
            with held(path):
                yield
        except Timeout:
            raise TransientError(f"{path}: another writer held its lock for {LOCK_TIMEOUT_S:g} s") from None

    def _current(self, path: str, etag: str) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise ObjectGone(path) from None
        if signature(st) != etag:
            raise ObjectChanged(path)

    def put_if_match(self, url: str, data: bytes, etag: str) -> ObjectInfo:
        path = checked_path(url)
        temp = self._temp(path, data)
        try:
            with self._locked(path):
                self._current(path, etag)
                return self._publish(temp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def delete_if_match(self, url: str, etag: str) -> None:
        path = checked_path(url)
        with self._locked(path):
            self._current(path, etag)
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        fsync_dir(os.path.dirname(path))
