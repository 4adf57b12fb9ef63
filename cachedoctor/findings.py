"""The finding: one defect in one cache file, in the stable vocabulary the README documents.

Findings cross process boundaries (scan workers) and end up in JSON, so they are small frozen
records of plain values.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Severity(str, enum.Enum):
    """How bad a finding is. Ordered: ``error`` > ``warning`` > ``info``."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


class Fix(str, enum.Enum):
    """The repair action that would cure a finding (carried out by ``cachedoctor repair``)."""

    RECOMPUTE = "recompute"
    CLONE_STORAGE = "clone-storage"
    REWRITE_CPU = "rewrite-cpu"
    QUARANTINE = "quarantine"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Finding:
    """One defect. ``path`` is absolute; ``source`` is the dataset item, when known."""

    kind: str
    severity: Severity
    path: str
    message: str
    fix: Fix
    source: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The public JSON form (schema ``cachedoctor.scan/1``, one finding)."""
        return {
            "kind": self.kind,
            "severity": self.severity.value,
            "path": self.path,
            "source": self.source,
            "message": self.message,
            "fix": self.fix.value,
            "details": dict(self.details),
        }

    def sort_key(self) -> tuple[int, str, str]:
        """Worst first, then by kind and path, so every output is deterministic."""
        return (-self.severity.rank, self.kind, self.path)
