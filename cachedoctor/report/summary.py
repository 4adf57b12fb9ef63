"""What a scan report renders, as plain values: the report does not reach into the engine.

:class:`ScanSummary` is built once from the engine's ``ScanResult`` (:meth:`ScanSummary.of`,
duck-typed so that ``report/`` imports nothing from ``scan/``) and carries the findings, the
counts and the few facts about the run that the formats print. A library caller can build one by
hand, and the renderers stay testable without a scan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cachedoctor.findings import Finding


@dataclass(frozen=True, slots=True)
class Problem:
    """A file the scan could not check (a scan with any is incomplete: exit 2)."""

    path: str
    message: str


@dataclass(frozen=True, slots=True)
class Counts:
    files_seen: int = 0
    files_read: int = 0
    files_skipped: int = 0
    bytes_read: int = 0
    folders: int = 0
    formats: Mapping[str, int] = field(default_factory=dict)
    files_reused: int = 0  # unchanged since the state's record: not read again
    files_deep: int = 0  # read deep by this scan
    io_bytes: int = 0  # what the readers took from the files (headers when quick, whole files when deep)
    reused_skipped: int = 0  # of ``files_reused``, foreign files (not cache files)
    files_dataset: int = 0  # the dataset's own files beside the cache (images, captions), not read


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    """What the scan compared the cache with (a layout's plan of the dataset)."""

    layout: str  # a layout name, or "mixed": ``parts`` says which part of the targets got which
    items: int
    skipped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    parts: tuple[tuple[str, str | None, str], ...] = ()  # (layout or "none", folder, its layout line)


@dataclass
class ScanSummary:
    targets: list[str]
    findings: list[Finding]
    counts: Counts = field(default_factory=Counts)
    errors: list[Problem] = field(default_factory=list)
    deep: bool = False
    mode: str = "quick"  # quick, deep, or "deep sample 5%"
    sample: str | None = None
    elapsed: float = 0.0
    dataset: DatasetSummary | None = None
    notes: list[str] = field(default_factory=list)  # about the scan itself (the state database)
    empty: bool = False  # no cache file judged and no dataset entry expected: nothing was checked
    unchecked: list[str] = field(default_factory=list)  # named folders under which nothing was checked
    excluded: bool = False  # --exclude patterns were given (they may be what left nothing to check)
    special: str | None = None  # the note on special files skipped unopened (also in ``notes``)
    state: bool = False  # a state database kept this scan's reads (and a deep read's digests)

    @classmethod
    def of(cls, result: Any) -> ScanSummary:
        """The summary of an engine ``ScanResult`` (a ``ScanSummary`` is returned as it is)."""
        if isinstance(result, ScanSummary):
            return result
        stats, options, plan = result.stats, result.options, result.dataset
        counts = Counts(
            stats.files_seen,
            stats.files_read,
            stats.files_skipped,
            stats.bytes_read,
            stats.folders,
            dict(stats.formats),
            stats.files_reused,
            stats.files_deep,
            stats.io_bytes,
            stats.reused_skipped,
            stats.files_dataset,
        )
        dataset = (
            DatasetSummary(
                plan.layout,
                plan.items,
                tuple(plan.skipped),
                tuple(plan.notes),
                tuple((p.layout, p.root, p.line) for p in getattr(plan, "parts", ())),
            )
            if plan is not None
            else None
        )
        return cls(
            targets=list(result.targets),
            findings=list(result.findings),
            counts=counts,
            errors=[Problem(e.path, e.message) for e in result.errors],
            deep=bool(options.deep),
            mode=options.mode,
            sample=options.sample.text if options.sample else None,
            elapsed=result.elapsed,
            dataset=dataset,
            notes=list(result.notes),
            empty=bool(result.empty),
            unchecked=list(result.unchecked),
            excluded=bool(options.exclude),
            special=result.special,
            state=options.state is not None,
        )


__all__ = ["Counts", "DatasetSummary", "Problem", "ScanSummary"]
