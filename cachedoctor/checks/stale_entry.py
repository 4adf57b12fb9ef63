"""``stale-entry``: the source changed after its cache entry was written.

Judged by content where the layout recorded it (a manifest's xxh3, kohya's ``original_size``),
otherwise by modification time with a small tolerance for coarse file-system clocks. A trainer
reading a stale entry trains on the old image or caption without a word.
"""

from __future__ import annotations

from typing import Iterable

from cachedoctor.checks.interface import Check, Found
from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.layouts.interface import Expected

#: Source mtimes within this of the entry's are not judged: FAT and some network file systems
#: keep 1-2 s resolution, and a trainer may write the entry within the second it read the image.
MTIME_TOLERANCE_NS = 2_000_000_000


class StaleEntry(Check):
    kind = "stale-entry"
    severity = Severity.WARNING
    fix = Fix.RECOMPUTE
    summary = "the image or caption changed after its cache entry was written"

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        if expected is None or found is None or not expected.source_exists or not expected.in_index:
            return
        if expected.stale_reason:
            yield self.finding(found.path, expected.stale_reason, source=expected.source, by="content")
        elif is_stale_by_mtime(expected, found):
            assert expected.source_mtime_ns is not None
            ahead = (expected.source_mtime_ns - found.mtime_ns) / 1e9
            yield self.finding(found.path, f"the source was modified {_ago(ahead)} after this entry was written",
                               source=expected.source, by="mtime", seconds_newer=round(ahead, 1))


def is_stale_by_mtime(expected: Expected, found: Found) -> bool:
    return expected.source_mtime_ns is not None and expected.source_mtime_ns > found.mtime_ns + MTIME_TOLERANCE_NS


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"
