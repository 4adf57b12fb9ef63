"""``orphan-entry``: a cache file that no dataset item maps to any more.

Left behind when images are deleted or renamed, or when a caption changes (its embed is named
after the caption's hash). Harmless for most trainers but it wastes disk and, for position-keyed
caches (OneTrainer), it is an item the trainer will still load. Quarantined, never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cachedoctor.checks.interface import Check, Found
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.layouts.interface import Expected


class OrphanEntry(Check):
    kind = "orphan-entry"
    severity = Severity.WARNING
    fix = Fix.QUARANTINE
    summary = "a cache file that no dataset item maps to (its image or caption is gone)"
    why = (
        "Usually harmless, hence a warning: no item asks for the file, so it only takes disk "
        "space. Two cases are not: a OneTrainer cache is keyed by position, so an orphaned "
        "<i>.pt is an entry the trainer still loads, for an image that is gone; and many "
        "orphans mean the cache was built from another dataset than the one you train on "
        "now, so check for stale entries too."
    )
    repair = (
        "quarantine: the file is moved into <cache root>/.cachedoctor/quarantine/<run>/, "
        "never deleted, and nothing is written in its place; an orphan goes whatever else "
        "is wrong with it. If the image was only moved or renamed, `cachedoctor "
        "quarantine restore RUN CACHE_ROOT` puts it back; `cachedoctor quarantine purge "
        "RUN CACHE_ROOT` frees the disk for good."
    )

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        if found is None:
            return
        if expected is None:
            yield self.finding(found.path, "no dataset item maps to this cache file")
        elif not expected.source_exists:
            yield self.finding(
                found.path, "the cache lists an item whose source no longer exists", listed_source=expected.source
            )
