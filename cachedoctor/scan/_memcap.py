"""The memory cap of a scan's reader processes: no file can make its reader take more than
:data:`FILE_MEMORY` bytes beyond what the worker held when it started.

The cap is ``RLIMIT_DATA``, which (Linux 4.7 and later) counts a process's private writable
memory: the heap, anonymous maps, every buffer a reader allocates. It does not count file-backed
shared maps, so the deep read's ``mmap`` of a 50 GB file (``formats._mapped``, ``MAP_SHARED``)
is not refused; ``RLIMIT_AS`` would refuse it. An allocation past the cap fails in the reader:
Python raises ``MemoryError`` (numpy and zlib too), which the readers turn into
``ReadError("too-large")``, and the worker turns into the fail-closed verdict of
:func:`over_cap`: a file that cannot be shown safe within the cap is ``unsafe-pickle``
(``resource-bomb``), since whatever loads it needs at least as much. A reader killed outright
(an allocation that aborts) is caught by the pool (``pool.py``).

Freed memory must go back to the system for the next file: glibc's dynamic ``mmap`` threshold
would otherwise rise with every large buffer freed, and keep the next ones on a heap that does
not shrink. The threshold is fixed, and the heap trimmed after a file that hit the cap.
"""

from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the readers are imported where a verdict is made: the engine names FILE_MEMORY only
    from cachedoctor.formats import ReadError

#: What one file may make its reader allocate (on top of the worker's own memory at start):
#: 192 MiB. The largest cache file a trainer writes that a reader must hold whole (a deflated npz
#: member of a video latent, a gzipped torch file) inflates to tens of MB; a deep read maps
#: the file itself, which this cap does not count. Two workers (the default on a 2-CPU machine)
#: then stay within the 512 MiB the whole scan may use (``bench/safety_bench.py``):
#: the parent (~60 MiB) plus two workers of ~40 MiB each plus their caps.
FILE_MEMORY = 192 << 20

_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 256 << 10

_limit: int | None = None  # this process's cap per file, once set


def cap_memory(per_file: int | None) -> None:
    """In a reader process: cap its private memory at what it holds now plus ``per_file``
    bytes (``None``: no cap). Where the limit cannot be set (another OS) the cap is skipped:
    the time watchdog still holds."""
    global _limit
    _fix_malloc()
    if not per_file:
        return
    held = _data_bytes()
    if held is None:
        return
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        soft = held + per_file
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError, AttributeError):
        return
    _limit = per_file


def capped() -> int | None:
    """This process's cap per file in bytes, or ``None`` when it has none."""
    return _limit


def over_cap(exc: BaseException) -> bool:
    """Whether ``exc`` says that a read ran out of memory: a ``MemoryError``, or the readers'
    ``too-large`` made of one (``formats.read_file``)."""
    from cachedoctor.formats import ReadError

    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, ReadError) and exc.problem == "too-large" and isinstance(exc.__context__, MemoryError)


def cap_error(limit: int) -> ReadError:
    """The verdict on a file whose reading needed more than ``limit`` bytes: it cannot be shown
    safe, and whatever loads it needs at least as much (reported as ``unsafe-pickle``)."""
    from cachedoctor.formats import ReadError

    return ReadError(
        "resource-bomb",
        f"cannot be shown safe: reading it needed more than {limit >> 20} MiB, the scan's memory cap "
        "per file; a loader would need at least as much: a resource bomb, or a file no cache holds",
        limit=f"{limit >> 20} MiB of memory per file",
    )


def died_error(limit: int | None) -> ReadError:
    """The verdict on a file whose reader process died while reading it, twice, the second time
    alone: it cannot be shown safe."""
    from cachedoctor.formats import ReadError

    cap = f" (memory cap {limit >> 20} MiB per file)" if limit else ""
    return ReadError(
        "resource-bomb",
        f"cannot be shown safe: its reader process died while reading it{cap}, twice, the second time "
        "alone; a loader would likely fail or exhaust its memory the same way",
        limit="reader process died",
    )


def release() -> None:
    """Give the memory a failed read freed back to the system (glibc only)."""
    libc = _libc()
    if libc is not None:
        try:
            libc.malloc_trim(0)
        except AttributeError:
            pass


def _fix_malloc() -> None:
    libc = _libc()
    if libc is not None:
        try:
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        except AttributeError:
            pass


def _libc() -> Any:
    import ctypes  # here: only a reader process calls this, never a rescan that reads nothing

    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def _data_bytes() -> int | None:
    """``VmData`` of this process: what ``RLIMIT_DATA`` counts."""
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
