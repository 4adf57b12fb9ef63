"""``stale-entry``: the source changed after its cache entry was written.

Judged by content where it was recorded (a manifest's xxh3, kohya's ``original_size`` against
the image's header),
otherwise by modification time with a small tolerance for coarse file-system clocks. A trainer
reading a stale entry trains on the old image or caption without a word.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cachedoctor.checks.interface import Check, Found
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.layouts.interface import Expected

#: Source mtimes within this of the entry's are not judged: FAT and some network file systems
#: keep 1-2 s resolution, and a trainer may write the entry within the second it read the image.
MTIME_TOLERANCE_NS = 2_000_000_000


class StaleEntry(Check):
    kind = "stale-entry"
    severity = Severity.WARNING
    fix = Fix.RECOMPUTE
    summary = "the image or caption changed after its cache entry was written"
    why = (
        "A cache file is named after the image (or the caption's hash), not its content, so "
        "an edited image, a new crop or a corrected caption keeps the old file: the model "
        "trains on the old image or caption without a word, and SimpleTuner checks nothing "
        "of the kind before training. (A caption change under a hash-named embed shows "
        "instead as a missing-entry plus an orphan-entry.)"
    )
    repair = (
        "recompute: the item is encoded again from its current source, and the stale file "
        "goes to the quarantine (restore it if the change to the source was the mistake)."
    )

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        if expected is None or found is None or not expected.source_exists or not expected.in_index:
            return
        recorded = _recorded_size(found)
        if expected.stale_reason:
            items: dict[str, Any] = {"items": list(expected.items)} if expected.items else {}
            yield self.finding(found.path, expected.stale_reason, source=expected.source, by="content", **items)
        elif expected.image_size is not None and recorded is not None and recorded != expected.image_size:
            yield self.finding(
                found.path,
                f"original_size records {recorded[0]}x{recorded[1]} but the image is now "
                f"{expected.image_size[0]}x{expected.image_size[1]}",
                source=expected.source,
                by="content",
                recorded=list(recorded),
                image_size=list(expected.image_size),
            )
        elif is_stale_by_mtime(expected, found):
            assert expected.source_mtime_ns is not None
            ahead = (expected.source_mtime_ns - found.mtime_ns) / 1e9
            yield self.finding(
                found.path,
                f"the source was modified {_ago(ahead)} after this entry was written",
                source=expected.source,
                by="mtime",
                seconds_newer=round(ahead, 1),
            )


def _recorded_size(found: Found) -> tuple[int, int] | None:
    """kohya's ``original_size`` (or ``original_size_<h>x<w>``): the image's (W, H) at caching."""
    for key, values in found.values:
        if (key == "original_size" or key.startswith("original_size_")) and len(values) == 2:
            return int(values[0]), int(values[1])
    return None


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
