"""Which file system a path lives on, from ``/proc/self/mounts`` (Linux; elsewhere: unknown).

SQLite's WAL mode needs shared memory between the processes that open a database, which a
network file system cannot give processes on different machines (SQLite's own documentation:
"WAL does not work over a network filesystem"). Training caches often live on NFS, Lustre or
GPFS, scanned from several nodes, so databases there use a rollback journal instead.
"""

from __future__ import annotations

import os

#: File system types shared between machines (``fuse.*`` covers BeeGFS, JuiceFS, s3fs, gcsfuse...).
NETWORK_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "ceph",
        "glusterfs",
        "beegfs",
        "9p",
        "afs",
        "wekafs",
        "panfs",
        "orangefs",
        "pvfs2",
    }
)
MOUNTS = "/proc/self/mounts"


def filesystem_type(path: str, mounts: str = MOUNTS) -> str | None:
    """The type of the file system holding ``path`` (the deepest mount point above it), or ``None``."""
    target = os.path.realpath(path)
    best, kind = "", None
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def is_network(path: str, mounts: str = MOUNTS) -> bool:
    kind = filesystem_type(path, mounts)
    return kind is not None and (kind in NETWORK_TYPES or kind.startswith("fuse."))


__all__ = ["NETWORK_TYPES", "filesystem_type", "is_network"]


def not_writable(folder: str) -> str | None:
    """Why nothing can be written in ``folder`` (``is on a read-only file system``, ``is not
    writable by this user``), or ``None``. A read-only mount stops root too; a permission only
    stops others (``os.access`` answers for the real user, as the write would)."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except OSError:
        return None  # it cannot be looked at: the write itself will say why
    if not os.access(folder, os.W_OK | os.X_OK):
        return "is not writable by this user"
    return None
