"""Write a file so that readers see the old version or the new one, never a half (borg's SaveFile).

A temp file in the same folder (so the rename stays on one file system), flushed and fsynced,
then ``os.replace`` and an fsync of the folder, so the rename itself survives a power cut; on any
failure the temp file is removed and the target is untouched.

Temp files are named ``.cachedoctor-<purpose>-<random>.tmp``: the scan reports stray ``*.tmp``
files as ``partial-write``, and ``repair`` recognises this prefix as its own interrupted writes,
which it may delete (it wrote them, they hold no user data) instead of quarantining.

:func:`transfer` moves or copies a whole file across file systems with the same guarantee: the
quarantine, ``keep``, ``move`` and ``restore`` all go through it, so a cache folder that is a
symlink to another mount is handled in one place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from typing import BinaryIO, TextIO, TypeVar

from cachedoctor.lifetime import kill_due, kill_self
from cachedoctor.statedir import name_stem

TEMP_PREFIX = ".cachedoctor-"
TEMP_SUFFIX = ".tmp"

_Stream = TypeVar("_Stream", BinaryIO, TextIO)


def is_own_temp(name: str) -> bool:
    """Whether a file name is a temp file that cachedoctor's atomic writer creates."""
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


def fsync_dir(folder: str) -> None:
    """Make a rename or unlink in ``folder`` durable. File systems that refuse are tolerated."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


def _mode_for(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_UMASK


@contextlib.contextmanager
def _atomic(
    path: str, open_fd: Callable[[int], _Stream], prefix: str, before_replace: Callable[[str], None] | None = None
) -> Iterator[_Stream]:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=folder)
    try:
        os.fchmod(fd, _mode_for(path))  # mkstemp makes 0600; keep the old file's mode, or the umask's
        with open_fd(fd) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def atomic_text(path: str, *, prefix: str = TEMP_PREFIX) -> contextlib.AbstractContextManager[TextIO]:
    """A text stream; on a clean exit it replaces ``path``. ``OSError`` passes through.

    A ``path`` that is a device, a FIFO or a socket (``--output /dev/null``, ``/dev/stdout``, a
    named pipe) is written to as it is: replacing it would put a regular file where the device
    was (as root, ``/dev/null`` itself), and there is nothing there to keep whole."""
    if _is_special(path):
        return open(path, "w", encoding="utf-8")  # the caller's with-block closes it
    return _atomic(path, _open_text, prefix)


def _is_special(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def atomic_binary(
    path: str, *, prefix: str = TEMP_PREFIX, before_replace: Callable[[str], None] | None = None
) -> contextlib.AbstractContextManager[BinaryIO]:
    """A binary stream; on a clean exit it replaces ``path``. ``OSError`` passes through.

    ``before_replace(temp_path)`` runs once the new content is durable and before the rename
    (repair judges the new file there, then links the old one into the quarantine, so no
    instant exists without either copy); an exception from it removes the temp file and
    leaves ``path`` as it was.
    """
    return _atomic(path, _open_binary, prefix, before_replace)


def _open_text(fd: int) -> TextIO:
    return os.fdopen(fd, "w", encoding="utf-8")


def _open_binary(fd: int) -> BinaryIO:
    return os.fdopen(fd, "wb")


_CROSS_DEVICE = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP)  # link(2) refusals a copy gets round
_CHUNK = 1 << 20


def transfer(src: str, dest: str, *, keep_source: bool = False, sync: bool = True) -> None:
    """Put ``src``'s bytes at ``dest`` (replacing it). Without ``keep_source`` a move: a rename
    when both are on one file system, else a copy to a temp file beside ``dest`` (so on its file
    system), fsynced and renamed, and only then ``src`` removed. With ``keep_source`` a hard
    link, else the same copy. Killed at any instant, ``src`` is whole or ``dest`` is (maybe
    both); what may be left is a ``.cachedoctor-<name>-*.tmp`` beside ``dest``. A symlink that
    leads nowhere is moved or kept as the link itself (there is nothing to follow).

    ``sync=False`` (a kept copy, ``keep_source``, only) leaves the fsync of ``dest``'s folder to
    the caller, who makes a whole batch of links durable with one before any rename."""
    dangling = os.path.islink(src) and not os.path.exists(src)
    try:
        if keep_source:
            os.link(src, dest, follow_symlinks=not dangling)
        else:
            os.replace(src, dest)
    except OSError as exc:
        if exc.errno not in (_CROSS_DEVICE if keep_source else (errno.EXDEV,)):
            raise
        if dangling:
            _copy_link(src, dest)
        else:
            _copy(src, dest)
        if not keep_source:
            os.unlink(src)
    if sync or not keep_source:
        fsync_dir(os.path.dirname(dest))
    if not keep_source:
        fsync_dir(os.path.dirname(src))


def _copy(src: str, dest: str) -> None:
    """The cross-file-system half of :func:`transfer`. ``CACHEDOCTOR_TEST_KILL_IN_COPY=N``
    (tests only) SIGKILLs the process in the N-th copy, once part of it is in the temp file."""
    kill = kill_due("CACHEDOCTOR_TEST_KILL_IN_COPY")
    with open(src, "rb") as source, atomic_binary(dest, prefix=temp_prefix_for(dest)) as out:
        os.fchmod(out.fileno(), os.fstat(source.fileno()).st_mode & 0o7777)
        while chunk := source.read(_CHUNK):
            out.write(chunk[: len(chunk) // 2] if kill else chunk)
            if kill:
                out.flush()  # half of it in the temp file: what a kill mid-copy leaves
                kill_self()


def _copy_link(src: str, dest: str) -> None:
    """The cross-file-system :func:`transfer` of a dangling symlink: the same link at ``dest``."""
    temp = os.path.join(os.path.dirname(dest), f"{temp_prefix_for(dest)}{os.getpid()}{TEMP_SUFFIX}")
    os.symlink(os.readlink(src), temp)
    os.replace(temp, dest)


def temp_prefix_for(path: str) -> str:
    """The temp-file prefix for writing ``path``; :func:`temp_target` inverts it."""
    return f"{TEMP_PREFIX}{name_stem(os.path.basename(path))}-"


def temp_target(temp_path: str) -> str | None:
    """The file an own temp file was going to become (``.cachedoctor-<name>-XXXXXXXX.tmp``); for
    a name too long to carry, its stem (``statedir.name_stem``), whose lock is the file's."""
    name = os.path.basename(temp_path)
    if not is_own_temp(name):
        return None
    core = name[len(TEMP_PREFIX) : -len(TEMP_SUFFIX)]
    target, dash, rand = core.rpartition("-")
    if not dash or not target or len(rand) != 8:
        return None
    return os.path.join(os.path.dirname(temp_path), target)
