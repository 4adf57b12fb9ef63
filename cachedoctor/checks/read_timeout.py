"""``read-timeout``: the file could not be judged within ``--file-timeout`` seconds.

Every reader is bounded (see the limits in ``formats/_pickle_scan.py``), so a file that still
takes longer is either built to defeat them or sits on storage that stalls. Either way the scan
cannot vouch for it, and a CI gate must not hang on it: the worker reading it is replaced and
the file is reported instead of skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachedoctor.checks.interface import Check, Inspected
from cachedoctor.findings import Finding, Fix, Severity


class ReadTimeout(Check):
    kind = "read-timeout"
    severity = Severity.ERROR
    fix = Fix.QUARANTINE
    summary = "the file could not be judged within --file-timeout seconds (default 10); its reader was stopped"
    why = (
        "Reading one cache file's metadata takes milliseconds, and every reader is bounded in time "
        "and memory. A file that still takes longer was built to defeat those bounds or sits on a "
        "disk or network mount that stalls; a trainer would stall on it the same way, on every rank. "
        "The scan cannot vouch for what it did not finish reading."
    )
    repair = (
        "quarantine: repair scans again first; a file that is judged in time then is treated on "
        "what it holds, one that times out again is moved out of the cache (restorable with "
        "cachedoctor quarantine restore). Raise --file-timeout for a slow mount."
    )

    def check_file(self, item: Inspected) -> Iterable[Finding]:
        if item.error is not None and item.error.problem == "timeout":
            yield self.finding(
                item.path, item.error.message, problem="timeout", seconds=item.error.details.get("seconds")
            )
