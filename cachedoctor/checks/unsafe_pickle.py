"""``unsafe-pickle``: the pickle names globals outside the allow-list.

``torch.load`` without ``weights_only`` would import and call them: that is how a cache file runs
code. cachedoctor records the names and never resolves them.
"""

from __future__ import annotations

from typing import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class UnsafePickle(Check):
    kind = "unsafe-pickle"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "the pickle references a global outside the allow-list (reported, never run)"

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.meta is None or not item.meta.foreign_globals:
            return
        names = list(item.meta.foreign_globals)
        yield self.finding(
            item.path,
            f"pickle references {', '.join(names[:3])}{' ...' if len(names) > 3 else ''} outside the "
            f"allow-list; not executed. torch.load without weights_only would run it",
            globals=names, format=item.meta.format)
