"""``missing-entry``: a dataset item without its cache file.

SimpleTuner finds these only at collate time ("Some images were not correctly cached during
the VAE Cache operations"), hours into a run; kohya aborts on the first one. The finding's path
is where the file should be and its source the item, so ``repair`` can encode exactly those.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cachedoctor.checks.interface import Check, Found
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.layouts.interface import Expected


class MissingEntry(Check):
    kind = "missing-entry"
    severity = Severity.ERROR
    fix = Fix.RECOMPUTE
    summary = "a dataset item (image or caption) has no cache file"
    why = (
        "SimpleTuner checks only that a cache file exists, and only at collate time: the "
        'batch that needs the missing entry stops the run with "Some images were not '
        'correctly cached during the VAE Cache operations", hours in. Other loaders fail on '
        "the missing path (FileNotFoundError) at the same point; one that skips unreadable "
        "items trains without that image and never says so."
    )
    repair = (
        "recompute: the item is encoded and the file is written where the cache expects "
        "it (the finding's path); there is no old file, so nothing goes to the "
        "quarantine. A OneTrainer image that aggregate.pt does not list (the finding's "
        "path is the aggregate) cannot be added by position: re-cache that concept with "
        "OneTrainer."
    )

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        if expected is None or not expected.source_exists:
            return
        if not expected.in_index:
            yield self.finding(
                expected.path,
                f"{expected.role} of an item that the cache's index does not list (the cache predates it)",
                source=expected.source,
                role=expected.role,
            )
        elif found is None:
            yield self.finding(
                expected.path,
                f"no {expected.role} cache file for this item",
                source=expected.source,
                role=expected.role,
            )
