"""Everything about cachedoctor's own folder inside a cache root, and its lock files.

``<cache root>/.cachedoctor/`` holds the repair journal (``journal.sqlite``, one per rank under
torchrun), the quarantine (``quarantine/<run id>/``) and the scan's state database
(``state.sqlite`` with its clock file). The scan never enters it. Lock files are not in it: they
sit beside the file they guard (``<folder>/.<name>.lock``), the convention any cooperating
writer can follow with ``filelock``; the scan skips them and ``recover`` lists held ones.

One module owns these names so that the scan (which must skip them) and repair (which writes
them) cannot disagree, and neither has to import the other to learn them.
"""

from __future__ import annotations

import os

#: The folder, inside a cache root, that holds cachedoctor's own files.
STATE_DIR = ".cachedoctor"
#: The scan's incremental state database, and the clock file beside it (racy-entry tick).
STATE_FILE = "state.sqlite"
CLOCK_FILE = "state.clock"
QUARANTINE_DIR = "quarantine"
_LOCK_SUFFIX = ".lock"


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


def state_db_path(root: str) -> str:
    """The default state database of a scanned folder."""
    return os.path.join(root, STATE_DIR, STATE_FILE)


def clock_path(db_path: str) -> str:
    """The clock file beside a state database (touched once per scan to date racy entries)."""
    return os.path.join(os.path.dirname(db_path), CLOCK_FILE)


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
    "QUARANTINE_DIR",
    "STATE_DIR",
    "STATE_FILE",
    "clock_path",
    "is_lock_name",
    "is_state_dir_name",
    "journal_path",
    "lock_path",
    "name_stem",
    "quarantine_root",
    "state_db_path",
    "state_dir",
]
