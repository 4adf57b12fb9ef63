"""``non-finite``: NaN or Inf values in a floating tensor (deep mode reads the data).

Trainers find these lazily, one batch at a time, as a NaN loss hours into a run.
"""

from __future__ import annotations

from typing import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class NonFinite(Check):
    kind = "non-finite"
    severity = Severity.ERROR
    fix = Fix.RECOMPUTE
    summary = "NaN or Inf in a floating tensor (deep)"
    deep_only = True

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None:
            return
        bad = {t.display_key: t.nonfinite for t in item.meta.tensors if t.nonfinite}
        if bad:
            total = sum(bad.values())
            yield self.finding(item.path, f"{total} NaN/Inf value(s) in {', '.join(bad)}", counts=bad)
