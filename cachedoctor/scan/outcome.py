"""What a scan learns about one file: the small picklable record a worker sends back.

Its own module, apart from the worker that makes it, so that the parent's side of a scan (the
folders, the state database's codec and plan) can name it without importing the readers: a
rescan in which nothing changed reads no file and loads no reader.
"""

from __future__ import annotations

from cachedoctor.checks import PeerEntry
from cachedoctor.findings import Finding
from cachedoctor.records import record


@record
class Outcome:
    path: str
    size: int
    status: str  # "read" (judged: a broken link too), "skipped" (foreign or special file) or "error"
    findings: tuple[Finding, ...] = ()
    group: str | None = None  # peer group key within the folder
    peer: PeerEntry | None = None
    format: str | None = None
    error: str | None = None
    mtime_ns: int = 0  # dataset scans only, like ``shapes``
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    values: tuple[tuple[str, tuple[float, ...]], ...] = ()
    deep: bool = False  # the data was read (CRCs, NaN/Inf), not only the metadata
    xxh3: str | None = None  # of the whole file (the deep read's own digest), for the state database
    transient: bool = False  # judged by circumstance (a timeout): not kept in the state database
    io_bytes: int = 0  # bytes the read took from the file (a quick read: its header; deep: all of it)
    special: str | None = None  # "skipped": no regular file (a FIFO since the listing), never read
    broken_link: bool = False  # a dangling symlink or a loop: judged, but no file for the dataset to pair
