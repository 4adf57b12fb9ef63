"""How the local store names files and their versions (``local.py`` and ``local_links.py``):
a key is an absolute path that names exactly it, a version is a stat signature."""

from __future__ import annotations

import os

from cachedoctor.stores.interface import KeyNotStorable, ObjectInfo

NAME_MAX = 255  # bytes in one file name: ext4, XFS, btrfs, tmpfs, APFS (an object store allows 1024 in a key)


def signature(st: os.stat_result) -> str:
    """The version of a file as this store names it: its size, mtime and inode, which a rename
    over it or a write that moves the mtime changes. A writer that rewrites a file in place and
    sets its mtime back is not seen (the ctime would see it, but the quarantine's hard link
    changes the ctime too, so the version would not survive keeping the file): writers are held
    out by the per-file lock instead, as the conditional writes take it."""
    return f"{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ino:x}"


def file_info(path: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(path, st.st_size, signature(st), st.st_mtime_ns)


def checked_path(url: str) -> str:
    """``url`` as a path that names exactly it, else :class:`KeyNotStorable`."""
    if not url.startswith("/"):
        raise KeyNotStorable(url, "is not an absolute path; the local store names files by absolute path")
    if os.path.normpath(url) != url or url.endswith("/"):
        raise KeyNotStorable(url, "a file system would store this key under another name ('//', '.', '..')")
    if any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX for part in url.split("/")):
        raise KeyNotStorable(url, f"a file name here is longer than a file system's {NAME_MAX} bytes")
    return url


__all__ = ["checked_path", "file_info", "signature"]
