"""What a scan returns (:class:`ScanResult`) and the two judgements made only once the whole
scan is in: the training run's rules (:func:`judge_run`) and the note on special files
(:func:`special_note`). Apart from ``engine.py`` because ``merge.py`` assembles every result,
and the engine calls the merge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachedoctor.checks import RUN_CHECKS, RunView
from cachedoctor.findings import Finding
from cachedoctor.scan.folders import ScanError, ScanStats
from cachedoctor.scan.options import ScanOptions

if TYPE_CHECKING:
    from cachedoctor.layouts.interface import DatasetPlan
    from cachedoctor.scan.part import PlanFacts


@dataclass(slots=True)
class ScanResult:
    targets: list[str]
    options: ScanOptions
    findings: list[Finding]
    stats: ScanStats
    errors: list[ScanError]
    elapsed: float
    dataset: DatasetPlan | PlanFacts | None = None  # PlanFacts: merged from parts, where no plan is at hand
    notes: list[str] = field(default_factory=list)  # about the scan itself (the state database)
    #: Of the folders the caller asked to ``watch``, those that held nothing to check (no cache
    #: file judged, no finding, nothing unreadable): one empty target among others must not pass
    #: a gate either (a second cache on a disk that is not mounted).
    unchecked: list[str] = field(default_factory=list)
    special: str | None = None  # the note on FIFOs, sockets and devices skipped unopened (also in ``notes``)

    @property
    def empty(self) -> bool:
        """Nothing to check: no file was judged as a cache file (every file under a cache name
        is, and any other whose bytes are a cache format) and the dataset expected no entry
        (one it expected and did not find is a finding), with nothing unreadable. A CI gate
        pointed at such targets (an unmounted disk, a mistyped folder, one of images only) must
        not pass: see ``ScanReport.exit_code`` and ``allow_empty``."""
        return self.stats.files_read == 0 and not self.findings and not self.errors


def judge_run(run: RunView) -> list[Finding]:
    """The rules about the training run as a whole (``Check.check_run``), once every folder is in."""
    return [finding for check in RUN_CHECKS for finding in check.check_run(run)]


def special_note(entries: list[tuple[str, str]], shown: int = 5) -> str:
    """``skipped 1 special file (FIFO): /x/pipe.pt``: FIFOs, sockets and devices named like
    cache files, which the scan never opens (a FIFO would block it, a device has side effects)."""
    entries = sorted(entries)
    kinds = ", ".join(sorted({kind for _, kind in entries}))
    paths = ", ".join(path for path, _ in entries[:shown])
    more = f" and {len(entries) - shown} more" if len(entries) > shown else ""
    n = len(entries)
    return f"skipped {n} special file{'s' if n != 1 else ''} ({kinds}): {paths}{more}"


__all__ = ["ScanResult", "judge_run", "special_note"]
