"""Everything about cachedoctor's own folder inside a cache root, and its lock files.

``<cache root>/.cachedoctor/`` holds the repair journal (``journal.sqlite``, one per rank under
torchrun), the quarantine (``quarantine/<run id>/``) and the scan's state database
(``state.sqlite`` with its clock file; a sharded scan's shard K of N keeps
``state.shard-K-of-N.sqlite`` and ``state.shard-K-of-N.clock``, so that no two nodes ever write
one SQLite file: :func:`sharded_path`). The scan never enters it. Lock files are not in it: they
sit beside the file they guard (``<folder>/.<name>.lock``), the convention any cooperating
writer can follow with ``filelock``; the scan skips them and ``recover`` lists held ones.

One module owns these names so that the scan (which must skip them) and repair (which writes
them) cannot disagree, and neither has to import the other to learn them.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachedoctor.sharding.interface import Shard

#: The folder, inside a cache root, that holds cachedoctor's own files.
STATE_DIR = ".cachedoctor"
#: The scan's incremental state database, and the clock file beside it (racy-entry tick).
STATE_FILE = "state.sqlite"
CLOCK_FILE = "state.clock"
QUARANTINE_DIR = "quarantine"
_LOCK_SUFFIX = ".lock"
LOCK_SUFFIX = _LOCK_SUFFIX  # what every lock file name ends with (scan/walk.py tests it inline)


def state_dir(root: str) -> str:
    """``<root>/.cachedoctor``."""
    return os.path.join(root, STATE_DIR)


def is_state_dir_name(name: str) -> bool:
    """Whether a folder name is cachedoctor's own folder (the scan never walks into it)."""
    return name == STATE_DIR


def journal_path(root: str, rank: int | None = None) -> str:
    """The repair journal of ``root``; under torchrun each rank has its own file (a database
    shared over NFS by several hosts is not safe)."""
    return os.path.join(root, STATE_DIR, "journal.sqlite" if rank is None else f"journal-rank{rank}.sqlite")


def quarantine_root(root: str) -> str:
    """Where every run's quarantine folder of ``root`` lives."""
    return os.path.join(root, STATE_DIR, QUARANTINE_DIR)


def state_db_path(root: str, shard: Shard | None = None) -> str:
    """The default state database of a scanned folder (of one shard of its scan: :func:`sharded_path`)."""
    return sharded_path(os.path.join(root, STATE_DIR, STATE_FILE), shard)


def sharded_path(path: str, shard: Shard | None) -> str:
    """The database that shard K of N of a scan (``--shard K/N``, K from 0) keeps in place of
    ``path``: ``.shard-K-of-N`` inserted before the suffix (``state.sqlite`` ->
    ``state.shard-0-of-4.sqlite``; a name with no suffix gets it at the end). No shard, or the
    one shard of one (the whole cache): ``path`` itself. The one rule for every state name: the
    default one, the remote one and ``--state PATH``."""
    if shard is None or shard.whole:
        return path
    folder, name = os.path.split(path)
    stem, suffix = os.path.splitext(name)
    return os.path.join(folder, f"{stem}{_tag(shard.index, shard.count)}{suffix}")


def _tag(index: int, count: int) -> str:
    return f".shard-{index}-of-{count}"


#: The tag :func:`sharded_path` puts in a name (before its suffix, or at its end).
_TAG = re.compile(r"\.shard-[0-9]+-of-[0-9]+(?=(\.[^.]*)?$)")


def other_splits(path: str, shard: Shard | None) -> list[str]:
    """The databases that other splits of the same scan keep beside ``path`` (the unsharded name):
    for shard K of N, ``path`` itself and every shard of a count other than N; unsharded, every
    shard. The files that exist, the unsharded one first, then by count and index."""
    count_now = None if shard is None or shard.whole else shard.count
    folder, name = os.path.split(path)
    stem, suffix = os.path.splitext(name)
    pattern = re.compile(re.escape(stem) + r"\.shard-([0-9]+)-of-([0-9]+)" + re.escape(suffix))
    found: list[tuple[int, int, str]] = []
    try:
        with os.scandir(folder or ".") as entries:
            for entry in entries:
                match = pattern.fullmatch(entry.name)
                if match is None or not entry.is_file():
                    continue
                index, count = int(match[1]), int(match[2])
                if index < count and count != count_now:
                    found.append((count, index, entry.path))
    except OSError:
        return []
    whole = [path] if count_now is not None and os.path.isfile(path) else []
    return whole + [p for _, _, p in sorted(found)]


def clock_path(db_path: str) -> str:
    """The clock file beside a state database (touched once per scan to date racy entries);
    each shard's its own (``state.shard-K-of-N.clock``), as its database is."""
    folder, name = os.path.split(db_path)
    tag = _TAG.search(name)
    if tag is None:
        return os.path.join(folder, CLOCK_FILE)
    stem, suffix = os.path.splitext(CLOCK_FILE)
    return os.path.join(folder, f"{stem}{tag[0]}{suffix}")


def name_stem(name: str) -> str:
    """What a file's lock and temp names carry of its name: the name itself, or, for a name too
    long to carry with a prefix and suffix within the file system's 255 bytes a name, its first
    200 bytes and a hash of the whole (``<first bytes>~<hash>``): still unique per file."""
    raw = os.fsencode(name)
    if len(raw) <= _STEM_MAX:
        return name
    import hashlib

    return f"{os.fsdecode(raw[:200])}~{hashlib.sha256(raw).hexdigest()[:16]}"


_STEM_MAX = 230  # leaves room for ".cachedoctor-" + "-XXXXXXXX.tmp" (22 bytes) or "." + ".lock"


def lock_path(path: str) -> str:
    """The lock file guarding writes to ``path``: ``<folder>/.<name>.lock`` (the convention any
    cooperating writer can follow; a name too long for it: ``name_stem``)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name_stem(name)}{_LOCK_SUFFIX}")


def is_lock_name(name: str) -> bool:
    """Whether a file name is a lock file (never a cache entry, never an orphan)."""
    return name.startswith(".") and name.endswith(_LOCK_SUFFIX)


__all__ = [
    "CLOCK_FILE",
    "LOCK_SUFFIX",
    "QUARANTINE_DIR",
    "STATE_DIR",
    "STATE_FILE",
    "clock_path",
    "is_lock_name",
    "is_state_dir_name",
    "journal_path",
    "lock_path",
    "name_stem",
    "other_splits",
    "quarantine_root",
    "sharded_path",
    "state_db_path",
    "state_dir",
]
