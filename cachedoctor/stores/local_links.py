"""The local store's quarantine operations (``Capabilities.links`` and ``.appends``): a file
is kept by hard link and moved by rename (``atomic.transfer``: across file systems a fsynced
copy), a symbolic link that leads nowhere as the link itself, and records are appended to and
fsynced. A mixin of :class:`~cachedoctor.stores.local.LocalStore`, apart so that each module
stays one subject."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from cachedoctor.atomic import TEMP_SUFFIX, is_own_temp, temp_prefix_for, temp_target, transfer
from cachedoctor.statedir import is_lock_name, name_stem
from cachedoctor.stores.interface import Location, ObjectInfo
from cachedoctor.stores.local_paths import checked_path, file_info

#: The prefix of ``LocalStore``'s own temporaries (never a quarantined file).
STORE_TEMP = ".cachedoctor-store-"


class LocalLinks:
    """The :class:`~cachedoctor.stores.interface.Store` methods a file system can do without
    copying bytes (the interface's defaults are what an object store does instead)."""

    def head_entry(self, url: str) -> ObjectInfo | None:
        """The file, or a symbolic link that leads nowhere (a dangling link, a loop) as the
        link itself: what ``atomic.transfer`` keeps when it keeps a link."""
        path = checked_path(url)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            st = None
        if st is not None:
            return file_info(path, st) if stat.S_ISREG(st.st_mode) else None
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return file_info(path, st) if stat.S_ISLNK(st.st_mode) else None

    def list_entries(self, prefix: Location) -> Iterator[ObjectInfo]:
        """Every file and symbolic link under ``prefix`` as itself (``lstat``; links are not
        followed), leaving out temporaries (``atomic``'s and this store's) and lock files."""
        for dirpath, dirs, names in os.walk(prefix.url):
            dirs.sort()
            for name in sorted(names):
                if is_own_temp(name) or name.startswith(STORE_TEMP) or is_lock_name(name):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    yield file_info(path, st)

    def link(self, source: str, target: str, *, sync: bool = True) -> None:
        target = checked_path(target)
        try:
            transfer(checked_path(source), target, keep_source=True, sync=sync)
        except FileNotFoundError:
            if os.path.isdir(os.path.dirname(target)):
                raise
            os.makedirs(os.path.dirname(target), exist_ok=True)
            transfer(source, target, keep_source=True, sync=sync)

    def rename(self, source: str, target: str) -> None:
        target = checked_path(target)
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        _drop_temps_of(target)
        transfer(checked_path(source), target)

    def append(self, url: str, data: bytes, *, sync: bool = True) -> None:
        path = checked_path(url)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def sync(self, url: str) -> None:
        fd = os.open(checked_path(url), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete_under(self, prefix: Location) -> None:
        import shutil

        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(prefix.url)


def _drop_temps_of(target: str) -> None:
    """Remove the temp files of an earlier copy to ``target`` that a kill cut short. Their writer
    held ``target``'s lock for their whole life; the caller holds it now, so they are abandoned."""
    import glob

    pattern = glob.escape(os.path.join(os.path.dirname(target), temp_prefix_for(target))) + "*" + TEMP_SUFFIX
    for temp in glob.glob(pattern):
        if temp_target(temp) == os.path.join(os.path.dirname(target), name_stem(os.path.basename(target))):
            os.unlink(temp)
