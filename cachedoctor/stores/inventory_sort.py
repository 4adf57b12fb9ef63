"""Inventory rows sorted by key in flat memory: an external merge sort.

An inventory is in no order, and a scan's listing must be sorted by key (``walk.listed_folders``
completes a folder when a key outside it arrives). A target's rows are few enough to sort in
memory for most caches; for 10**8 keys they are not. So at most ``bound`` rows are held: each
time that many have come, they are sorted and written to a run (a gzip file of CSV rows in a
temporary folder, written and read by the csv module's C code: keys are any UTF-8, newlines
included, quoted), and the runs are merged by a heap at the end, one row of each in memory. Memory is ``bound`` rows plus one per run; disk is the
rows, compressed (level 1: keys under a common prefix shrink several times over). Str order
is code point order, which is the UTF-8 byte order S3 lists in. A key given twice (an
inventory should not, but it is untrusted) comes out once.
"""

from __future__ import annotations

import csv
import gzip
import heapq
import os
import tempfile
from collections.abc import Iterator

from cachedoctor.stores.inventory_model import Row

#: Rows held in memory before a run is spilled (about 300 bytes each in Python: ~75 MB).
DEFAULT_BOUND = 250_000


class SortedRows:
    """Add rows in any order, then read them once, sorted by key."""

    def __init__(self, bound: int = DEFAULT_BOUND, folder: str | None = None) -> None:
        if bound < 1:
            raise ValueError("bound must be at least 1")
        self.bound = bound
        self.folder = folder
        self.held: list[Row] = []
        self.runs: list[str] = []
        self.spilled = 0  # rows written to runs
        self.peak = 0  # the most rows held at once (what the memory test checks)
        self._temp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def count(self) -> int:
        """Rows added so far."""
        return self.spilled + len(self.held)

    def add(self, row: Row) -> None:
        held = self.held
        held.append(row)
        if len(held) >= self.bound:
            self._spill()

    def sorted(self) -> Iterator[Row]:
        """The rows by key, each key once; the temporary runs are removed when it ends."""
        self.peak = max(self.peak, len(self.held))
        try:
            if not self.runs:
                self.held.sort()  # (rows are tuples: by key first)
                rows: Iterator[Row] = iter(self.held)
            else:
                if self.held:
                    self._spill()
                rows = heapq.merge(*(_read_run(path) for path in self.runs))
            last = None
            for row in rows:
                if row.key != last:
                    last = row.key
                    yield row
        finally:
            self.close()

    def close(self) -> None:
        self.held = []
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    def _spill(self) -> None:
        if self._temp is None:
            self._temp = tempfile.TemporaryDirectory(prefix="cachedoctor-inventory-", dir=self.folder)
        self.peak = max(self.peak, len(self.held))
        self.spilled += len(self.held)
        self.held.sort()
        path = os.path.join(self._temp.name, f"run-{len(self.runs)}.csv.gz")
        with gzip.open(path, "wt", encoding="utf-8", newline="", compresslevel=1) as out:
            csv.writer(out).writerows(self.held)
        self.runs.append(path)
        self.held = []


def _read_run(path: str) -> Iterator[Row]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as lines:
        for key, size, etag, mtime_ns in csv.reader(lines):
            yield Row(key, int(size), etag, int(mtime_ns))


__all__ = ["DEFAULT_BOUND", "SortedRows"]
