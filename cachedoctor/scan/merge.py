"""Parts in, one scan out: the only place a scan's result is assembled, whether from the one part
of a whole-cache scan or from one part per shard (``part.py`` says what a part leaves to here).

Everything is ordered by content, never by which shard or worker answered first: findings by
severity, kind, path and then their whole text; problems by path; notes in shard order with
repeats dropped (every shard may say the same thing about the same state database). So the
sharded scan's report equals the whole scan's, byte for byte but for the time it took.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import fields
from itertools import chain
from typing import TYPE_CHECKING, Any

from cachedoctor.checks import RunView
from cachedoctor.findings import Finding
from cachedoctor.layouts.samplers.census import from_shapes
from cachedoctor.scan.dataset import judge_staleness
from cachedoctor.scan.folders import ScanError, ScanStats
from cachedoctor.scan.result import ScanResult, judge_run, special_note

if TYPE_CHECKING:
    from cachedoctor.scan.options import ScanOptions
    from cachedoctor.scan.part import Part


def merge(parts: list[Part], options: ScanOptions, dataset: Any = None) -> ScanResult:
    """One scan's result from its parts (any order). ``dataset``: the layout's plan, where this
    process has it (else the parts' record of it stands in for the report)."""
    parts = sorted(parts, key=lambda p: p.shard.index)
    first = parts[0]
    plan = dataset if dataset is not None else first.dataset
    findings = [f for p in parts for f in p.findings]
    stale, note = judge_staleness([f for p in parts for f in p.stale], sum(p.paired for p in parts))
    findings.extend(stale)
    if note is not None and plan is not None:
        plan.notes.append(note)
    if any(p.shapes is not None for p in parts):  # no dataset: the run's buckets are the shapes read
        shapes: Counter[tuple[int, int]] = Counter()
        for p in parts:
            shapes.update(p.shapes or {})
        buckets, run_notes = from_shapes(shapes, first.where, first.world_size, first.batch_size)
        findings.extend(judge_run(RunView(None, first.world_size, first.batch_size, tuple(buckets))))
    else:  # judged from the dataset's plan, the same on every shard
        findings.extend(first.run_findings)
        run_notes = list(first.run_notes)
    _sort(findings)
    errors = sorted({(e.path, e.message) for p in parts for e in p.errors})
    unchecked = _unchecked(parts, findings, errors)
    specials = [s for p in parts for s in p.special]
    special = special_note(specials) if specials else None
    notes = list(dict.fromkeys(n for p in parts for n in p.notes)) + ([special] if special else []) + run_notes
    if any(p.inventory for p in parts):
        from cachedoctor.scan.inventory_relist import inventory_notes

        notes += inventory_notes([fact for p in parts for fact in p.inventory])
    return ScanResult(
        list(first.targets),
        options,
        findings,
        _summed(parts),
        [ScanError(path, message) for path, message in errors],
        max(p.elapsed for p in parts),
        plan,
        notes,
        unchecked,
        special,
    )


def _unchecked(parts: list[Part], findings: list[Finding], errors: list[tuple[str, str]]) -> list[str]:
    """The named folders under which no shard checked anything: none read a cache file there,
    and no finding or problem (the run's own included) names a path under them."""
    left = set(parts[0].unchecked).intersection(*(p.unchecked for p in parts[1:]))
    for path in chain((f.path for f in findings), (path for path, _ in errors)):
        if not left:
            break
        left = {w for w in left if not (path == w or path.startswith(w.rstrip(os.sep) + os.sep))}
    return sorted(left)


def _sort(findings: list[Finding]) -> None:
    """Sort by content: severity, kind, path, message, source, then the details as JSON. The
    details' JSON is made only for the findings that tie on everything before it (one file's
    findings of one kind with one message): a scan of a million files can hold tens of thousands
    of findings, and dumping every one's details cost more than the rest of their merge."""
    findings.sort(key=_head)
    heads = [_head(f) for f in findings]
    start = 0
    for end in range(1, len(findings) + 1):
        if end == len(findings) or heads[end] != heads[start]:
            if end - start > 1:
                findings[start:end] = sorted(findings[start:end], key=_details)
            start = end


def _head(f: Finding) -> tuple[Any, ...]:
    return (*f.sort_key(), f.message, f.source or "")


def _details(f: Finding) -> str:
    return json.dumps(f.details, sort_keys=True, default=str)


def _summed(parts: list[Part]) -> ScanStats:
    """Every count of every part added up (``formats`` per format)."""
    total = ScanStats()
    for p in parts:
        for f in fields(ScanStats):
            if f.name == "formats":
                total.formats.update(p.stats.formats)
            else:
                setattr(total, f.name, getattr(total, f.name) + getattr(p.stats, f.name))
    return total


__all__ = ["merge"]
