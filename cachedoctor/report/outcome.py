"""The scan's verdict. This module alone maps outcomes to exit codes.

0: nothing at or above ``--fail-on``; 1: findings at or above it; 2: the scan could not run or
could not read everything (an incomplete scan certifies nothing); 130: interrupted.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from cachedoctor import __version__
from cachedoctor.findings import Finding, Severity
from cachedoctor.scan.engine import ScanResult

SCHEMA = "cachedoctor.scan/1"

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_COULD_NOT_RUN = 2
EXIT_INTERRUPTED = 130


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
    result: ScanResult
    fail_on: FailOn = FailOn.ERROR
    layout_line: str | None = None  # which layout the scan used and why

    @property
    def notes(self) -> list[str]:
        dataset = list(self.result.dataset.notes) if self.result.dataset is not None else []
        return dataset + list(self.result.notes)

    @property
    def findings(self) -> list[Finding]:
        return self.result.findings

    @property
    def exit_code(self) -> int:
        if self.result.errors:
            return EXIT_COULD_NOT_RUN
        if any(self.fail_on.trips(f.severity) for f in self.findings):
            return EXIT_FINDINGS
        return EXIT_CLEAN

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

    def next_step(self, show: Callable[[str], str] = str) -> str:
        """One sentence on what to run next; ``show`` renders paths (relative in the table)."""
        targets = " ".join(_quote(show(t)) for t in self.result.targets)
        deep_hint = f"`cachedoctor scan --deep {targets}` also checks CRCs and NaN/Inf."
        if self.result.dataset is not None:  # the cache folders came from the dataset, not the user
            deep_hint = "The same command with --deep also checks CRCs and NaN/Inf."
        if self.result.errors:
            return "Fix the access problems above and scan again; the files listed were not checked."
        if not self.findings:
            if self.result.options.deep:
                return "The cache is healthy."
            return deep_hint
        fixes = ", ".join(f"{n} to {fix}" for fix, n in self.by_fix().items() if fix != "none")
        hint = f"Files to fix: {fixes}." if fixes else ""
        if fixes:
            hint += " `cachedoctor repair` with the same arguments shows the plan (--dry-run) and carries it out."
        if not self.result.options.deep:
            hint += f" {deep_hint}"
        return hint.strip()

    def summary(self) -> dict[str, Any]:
        stats = self.result.stats
        return {
            "files_seen": stats.files_seen,
            "files_read": stats.files_read,
            "files_skipped": stats.files_skipped,
            "bytes_read": stats.bytes_read,
            "folders": stats.folders,
            "formats": dict(sorted(stats.formats.items())),
            "findings": len(self.findings),
            "files_with_findings": len({f.path for f in self.findings}),
            "by_kind": self.by_kind(),
            "by_severity": self.by_severity(),
            "by_fix": self.by_fix(),
            "errors": [{"path": e.path, "message": e.message} for e in self.result.errors],
            "deep": self.result.options.deep,
            "sample": self.result.options.sample.text if self.result.options.sample else None,
            "files_reused": stats.files_reused,
            "files_deep": stats.files_deep,
            "fail_on": self.fail_on.value,
            "exit_code": self.exit_code,
            "elapsed_s": round(self.result.elapsed, 3),
        }

    def document(self) -> dict[str, Any]:
        """The ``cachedoctor.scan/1`` JSON document (a public contract: see README)."""
        return {
            "schema": SCHEMA,
            "tool": {"name": "cachedoctor", "version": __version__},
            "targets": self.result.targets,
            "dataset": self.dataset(),
            "findings": [f.to_json() for f in self.findings],
            "summary": self.summary(),
        }

    def dataset(self) -> dict[str, Any] | None:
        """What the scan compared the cache with (``null`` for a cache-only scan)."""
        plan = self.result.dataset
        if plan is None:
            return None
        return {"layout": plan.layout, "reason": self.layout_line, "items": plan.items, "skipped": list(plan.skipped),
                "notes": list(plan.notes)}


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)
