"""The scan's verdict: :class:`ScanReport` owns the scan's exit code (as black's ``Report`` does).

CLEAN: nothing at or above ``--fail-on``; FINDINGS: findings at or above it; ERROR: the scan could
not read everything (an incomplete scan certifies nothing), or there was nothing to check (no
cache file and no dataset entry: an empty, mistyped or unmounted path must not pass a CI gate,
as pytest fails when it collects no test) unless ``allow_empty``. See
:mod:`cachedoctor.exit_status`.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachedoctor import __version__
from cachedoctor.exit_status import ExitStatus
from cachedoctor.findings import Finding, Severity
from cachedoctor.report.blind_spots import BlindSpot, blind_spots
from cachedoctor.report.summary import ScanSummary

if TYPE_CHECKING:
    from cachedoctor.repair.preview import RepairPreview

SCHEMA = "cachedoctor.scan/1"


class FailOn(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    NEVER = "never"

    def trips(self, severity: Severity) -> bool:
        if self is FailOn.NEVER:
            return False
        return severity.rank >= Severity(self.value).rank


@dataclass(frozen=True)
class ScanReport:
    """A scan's findings (after severity overrides and the baseline) and their verdict.

    ``scan`` takes a :class:`ScanSummary`; an engine ``ScanResult`` is summarised on the way in.
    """

    scan: ScanSummary
    fail_on: FailOn = FailOn.ERROR
    layout_line: str | None = None  # which layout the scan used and why (a line per subtree when they differ)
    suppressed: int | None = None  # findings the baseline left out (None: no baseline)
    baseline: str | None = None  # the baseline file read (or written), if any
    baseline_written: bool = False
    repair: RepairPreview | None = None  # what ``repair`` would do with these findings
    allow_empty: bool = False  # a scan with nothing to check is clean, not an error

    def __post_init__(self) -> None:
        if not isinstance(self.scan, ScanSummary):
            object.__setattr__(self, "scan", ScanSummary.of(self.scan))

    @property
    def notes(self) -> list[str]:
        dataset = list(self.scan.dataset.notes) if self.scan.dataset is not None else []
        return dataset + list(self.scan.notes)

    @property
    def blind_spots(self) -> list[BlindSpot]:
        """What this scan could not see in the formats it read (``report/blind_spots.py``)."""
        return blind_spots(self.scan.counts.formats, deep=self.scan.deep, digests=self.scan.state)

    @property
    def findings(self) -> list[Finding]:
        return self.scan.findings

    @property
    def nothing_to_check(self) -> bool:
        """The targets held no cache file and the dataset expected none, and that is not allowed."""
        return (self.scan.empty or bool(self.scan.unchecked)) and not self.allow_empty

    def empty_problem(self) -> tuple[str, str]:
        """``(targets, what to do)`` for the one line that a scan with nothing to check ends with."""
        if not self.scan.empty:  # some targets held cache files, these did not
            return nothing_to_check(self.scan.unchecked, excluded=self.scan.excluded)
        return nothing_to_check(
            self.scan.targets,
            dataset=self.scan.dataset is not None,
            others=self.scan.counts.files_skipped + self.scan.counts.files_dataset,
            special=self.scan.special,
            excluded=self.scan.excluded,
        )

    @property
    def exit_code(self) -> ExitStatus:
        if self.scan.errors or self.nothing_to_check:
            return ExitStatus.ERROR
        if any(self.fail_on.trips(f.severity) for f in self.findings):
            return ExitStatus.FINDINGS
        return ExitStatus.CLEAN

    def by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(f.kind for f in self.findings).items()))

    def by_severity(self) -> dict[str, int]:
        counts = Counter(f.severity.value for f in self.findings)
        return {s.value: counts.get(s.value, 0) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)}

    def by_fix(self) -> dict[str, int]:
        files: dict[str, set[str]] = {}
        for f in self.findings:
            files.setdefault(f.fix.value, set()).add(f.path)
        return {fix: len(paths) for fix, paths in sorted(files.items())}

    def clean_verdict(self) -> str:
        """The closing sentence when no finding is left; never "No findings" when a baseline hid some."""
        if self.suppressed:
            return f"No new findings: the {self.suppressed} recorded in the baseline are hidden."
        return "No findings."

    def next_step(self, show: Callable[[str], str] = str) -> str:
        """One sentence on what to run next; ``show`` renders paths (relative in the table)."""
        targets = " ".join(_quote(show(t)) for t in self.scan.targets)
        deep_hint = f"`cachedoctor scan --deep {targets}` also checks CRCs and NaN/Inf."
        if self.scan.dataset is not None:  # the cache folders came from the dataset, not the user
            deep_hint = "The same command with --deep also checks CRCs and NaN/Inf."
        if self.scan.errors:
            return "Fix the access problems above and scan again; the files listed were not checked."
        if self.scan.empty:
            return "There was no cache file to check."
        if not self.findings:
            if self.scan.deep:  # findings the baseline hides are still there: not "healthy"
                return "" if self.suppressed else "The cache is healthy."
            return deep_hint
        if self.repair is not None:
            hint = self.repair.sentence()
            if self.repair.fixable:
                hint += " Run it on the same paths (and dataset options); --dry-run shows the plan."
        else:
            fixes = ", ".join(f"{n} to {fix}" for fix, n in self.by_fix().items() if fix != "none")
            hint = f"Files to fix: {fixes}." if fixes else ""
            if fixes:
                hint += " `cachedoctor repair` on the same paths (and dataset options) shows the plan (--dry-run) and carries it out."
        if not self.scan.deep:
            hint += f" {deep_hint}"
        return hint.strip()

    def summary(self) -> dict[str, Any]:
        stats = self.scan.counts
        return {
            "files_seen": stats.files_seen,
            "files_read": stats.files_read,
            "files_skipped": stats.files_skipped,
            "files_dataset": stats.files_dataset,
            "bytes_read": stats.bytes_read,
            "folders": stats.folders,
            "formats": dict(sorted(stats.formats.items())),
            "findings": len(self.findings),
            "files_with_findings": len({f.path for f in self.findings}),
            "by_kind": self.by_kind(),
            "by_severity": self.by_severity(),
            "by_fix": self.by_fix(),
            "errors": [{"path": e.path, "message": e.message} for e in self.scan.errors],
            "deep": self.scan.deep,
            "sample": self.scan.sample,
            "files_reused": stats.files_reused,
            "files_deep": stats.files_deep,
            "io_bytes": stats.io_bytes,
            "empty": self.scan.empty,
            "unchecked": list(self.scan.unchecked),
            "notes": list(self.scan.notes),
            "limits": [b.to_json() for b in self.blind_spots],
            "fail_on": self.fail_on.value,
            "exit_code": int(self.exit_code),
            "elapsed_s": round(self.scan.elapsed, 3),
            "repair": self.repair.to_json() if self.repair is not None else None,
        }

    def document(self) -> dict[str, Any]:
        """The ``cachedoctor.scan/1`` JSON document (a public contract: see README)."""
        return {
            "schema": SCHEMA,
            "tool": {"name": "cachedoctor", "version": __version__},
            "targets": self.scan.targets,
            "dataset": self.dataset(),
            "findings": [f.to_json() for f in self.findings],
            "summary": self.summary(),
        }

    def dataset(self) -> dict[str, Any] | None:
        """What the scan compared the cache with (``null`` for a cache-only scan)."""
        plan = self.scan.dataset
        if plan is None:
            return None
        return {
            "layout": plan.layout,
            "reason": self.layout_line,
            "items": plan.items,
            "skipped": list(plan.skipped),
            "notes": list(plan.notes),
            "parts": [{"layout": layout, "root": root, "reason": line} for layout, root, line in plan.parts],
        }


def nothing_to_check(
    targets: list[str],
    *,
    dataset: bool = False,
    others: int = 0,
    special: str | None = None,
    excluded: bool = False,
) -> tuple[str, str]:
    """``(path, message)`` of the problem "these targets hold nothing to check", as scan, repair
    and recover report it (one line, exit 2). ``dataset``: the targets are a layout's cache
    folders, and its dataset expected no entry in them either; ``others``: the files that were
    there, none of them a cache file (images, a FIFO named ``.pt``)."""
    where = ", ".join(targets) if targets else "the targets"
    also = f" (only {others} other file{'s' if others != 1 else ''})" if others else ""
    if special:  # a FIFO named like a cache file: say it was one, and that it was left unopened
        also = f" ({special}, never opened)"
    if dataset:
        also += ", and the dataset expects none"
    if targets and all("://" in t for t in targets):  # bucket prefixes: no disk to mount
        scheme = targets[0].split("://", 1)[0]
        named = "an s3://" if scheme == "s3" else f"a {scheme}://"
        hint = f"check the bucket and prefix ({named} target names the objects under prefix/)"
        if excluded:
            hint += " and the --exclude patterns"
    elif excluded:
        hint = "check the path and the --exclude patterns (they may have left the files out)"
    elif others and not dataset and not special:  # images, say: a dataset whose whole cache is gone?
        hint = (
            "check the path (and that its disk is mounted); if its cache is gone, name the dataset's layout "
            "(--layout kohya, --kohya-config, --config) to see the missing entries"
        )
    else:
        hint = "check the path (and that its disk is mounted)"
    return where, f"no cache files (.pt, .npz, .safetensors, ...) here{also}; {hint}, or pass --allow-empty"


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)
