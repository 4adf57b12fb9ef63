"""The finding: one defect in one cache file, in the stable vocabulary the README documents.

Findings cross process boundaries (scan workers) and end up in JSON, so they are small frozen
records of plain values.
"""

from __future__ import annotations

import enum
import re
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

    def items(self) -> set[int]:
        """The items of a many-item file (a diffusion-pipe shard) this finding is about: its
        ``items`` detail, and every ``item <i>/<key>`` a detail names, as a value or a key (a shape
        or dtype finding names the tensor's key; a NaN count is keyed by it)."""
        found = {i for i in self.details.get("items") or () if isinstance(i, int)}
        for value in self.details.values():
            texts = value if isinstance(value, list) else list(value) if isinstance(value, Mapping) else [value]
            for text in texts:
                match = _ITEM_KEY.match(text) if isinstance(text, str) else None
                if match:
                    found.add(int(match.group(1)))
        return found


_ITEM_KEY = re.compile(r"^item (\d+)(?:/|$)")
