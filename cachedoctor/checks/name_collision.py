"""``name-collision``: two dataset items map to one cache file.

SimpleTuner names a latent after the image's stem, so ``cat.jpg`` and ``cat.png`` in one folder
share a file and one of them trains on the other's latent; kohya does the same when both have
the same size. Nothing can repair that but a rename, so the fix is ``none``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cachedoctor.checks.interface import Check, Found
from cachedoctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:  # type-only: importing formats/layouts would load every reader (explain, --version stay light)
    from cachedoctor.layouts.interface import Expected


class NameCollision(Check):
    kind = "name-collision"
    severity = Severity.ERROR
    fix = Fix.NONE
    summary = "two dataset items map to the same cache file (e.g. cat.jpg and cat.png); rename one"
    why = (
        "Two items read one file, so one of them trains on the other's latent: SimpleTuner "
        "names a latent after the image's stem, so cat.jpg and cat.png in one folder share "
        "one cache file that holds only one of them; kohya does the same for two images with "
        "one stem and one size. The model learns the wrong image for one caption and nothing "
        "reports it; the latent may not even fit the other item's bucket."
    )
    repair = (
        "none: no tool can say which item owns the file, so repair leaves it alone and "
        "exits 1. Rename all but one of the items (cat.png to cat_2.png) so each gets its "
        "own cache file, then repair again: the renamed item is a missing-entry, encoded "
        "through --encoder."
    )

    def check_entry(self, expected: Expected | None, found: Found | None) -> Iterable[Finding]:
        if expected is None or not expected.also:
            return
        sources = sorted({expected.source, *expected.also})
        names = ", ".join(os.path.basename(s) for s in sources)
        yield self.finding(
            expected.path,
            f"{len(sources)} items share this {expected.role} cache file: {names}; rename all but one",
            source=sources[0],
            sources=sources,
        )
