"""One shard's share of a scan, before the run as a whole is judged: a :class:`Part`.

A scan of the whole cache is the merge of one part (``merge.py``), and a sharded scan the merge
of one part per shard, so the two cannot drift apart: what a shard cannot judge alone is kept
raw here and judged at the merge. That is the rules about the training run (rank balance over
the latent shapes every shard counted), the rule that mass staleness by mtime means a copied
dataset (it needs every shard's pairings), the note on special files, and which named folders
held nothing (a folder is empty only if it is empty on every shard).

A part travels as a JSON document (``cachedoctor.scan-part/1``): between ranks, and in the files
that ``--shard K/N`` writes for ``cachedoctor merge``.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from cachedoctor.findings import Finding, Fix, Severity
from cachedoctor.scan.folders import ScanError, ScanStats
from cachedoctor.sharding.interface import Shard

PART_SCHEMA = "cachedoctor.scan-part/1"


class PlanPart(NamedTuple):
    layout: str
    root: str | None
    line: str


@dataclass(slots=True)
class PlanFacts:
    """What a report says of the dataset a scan compared the cache with (the facts of a
    layout's ``DatasetPlan`` that outlive the scan)."""

    layout: str
    items: int
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    parts: list[PlanPart] = field(default_factory=list)

    @classmethod
    def of(cls, plan: Any) -> PlanFacts:
        parts = [PlanPart(p.layout, p.root, p.line) for p in getattr(plan, "parts", ())]
        return cls(plan.layout, plan.items, list(plan.skipped), list(plan.notes), parts)


@dataclass(slots=True)
class Part:
    shard: Shard
    targets: list[str]
    findings: list[Finding] = field(default_factory=list)
    errors: list[ScanError] = field(default_factory=list)
    stats: ScanStats = field(default_factory=ScanStats)
    notes: list[str] = field(default_factory=list)  # about this shard's scan (its state database)
    unchecked: list[str] = field(default_factory=list)  # named folders nothing under which this shard checked
    special: list[tuple[str, str]] = field(default_factory=list)  # (path, "FIFO"...): skipped unopened
    stale: list[Finding] = field(default_factory=list)  # stale-entry by mtime alone: judged at the merge
    paired: int = 0  # dataset entries paired with a file (the mass-staleness rule's denominator)
    run_findings: list[Finding] = field(default_factory=list)  # the run's rules, judged from the dataset
    run_notes: list[str] = field(default_factory=list)
    shapes: dict[tuple[int, int], int] | None = None  # latent (H, W) counts: no dataset, the run's buckets
    where: str = ""  # what the run's buckets counted from the shapes are named after (the first root)
    world_size: int | None = None
    batch_size: int | None = None
    dataset: PlanFacts | None = None
    host: str = ""
    elapsed: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)  # store requests by kind (LIST, HEAD, GET)
    inventory: list[list[Any]] = field(default_factory=list)  # what its listings came from (inventory_relist.py)
    fingerprint: str = ""  # of the arguments that decide the report (parts to merge must share it)
    run: str = ""  # the run's id, where the launcher gives one (parts to merge must share it)
    settings: dict[str, Any] = field(default_factory=dict)  # what ``cachedoctor merge`` judges them by

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": PART_SCHEMA,
            "shard": [self.shard.index, self.shard.count],
            "run": self.run,
            "fingerprint": self.fingerprint,
            "host": self.host,
            "elapsed_s": round(self.elapsed, 3),
            "targets": self.targets,
            "findings": [_finding(f) for f in self.findings],
            "errors": [[e.path, e.message] for e in self.errors],
            "stats": {f.name: _plain(getattr(self.stats, f.name)) for f in fields(ScanStats)},
            "notes": self.notes,
            "unchecked": self.unchecked,
            "special": [list(s) for s in self.special],
            "stale": [_finding(f) for f in self.stale],
            "paired": self.paired,
            "run_findings": [_finding(f) for f in self.run_findings],
            "run_notes": self.run_notes,
            "shapes": None if self.shapes is None else [[h, w, n] for (h, w), n in sorted(self.shapes.items())],
            "where": self.where,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "dataset": None if self.dataset is None else _dataset(self.dataset),
            "requests": self.requests,
            "inventory": self.inventory,
            "settings": self.settings,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Part:
        """Raises ``ValueError`` (``KeyError``, ``TypeError``) on a document that is not a part.

        A part is untrusted input, as a cache file is: every field is checked for the type the
        merge needs (a count a whole number, not ``1e400`` or ``"many"``), so a damaged or
        forged part is refused here, in one line, never a traceback further on."""
        if not isinstance(doc, dict) or doc.get("schema") != PART_SCHEMA:
            raise ValueError(f"not a {PART_SCHEMA} document")
        index, count = doc["shard"]
        raw_stats = _mapping(doc["stats"])
        counts: dict[str, Any] = {k: _count(v) for k, v in raw_stats.items() if k != "formats"}
        stats = ScanStats(**counts)
        stats.formats.update({_text(k): _count(v) for k, v in _mapping(raw_stats["formats"]).items()})
        plan = doc["dataset"]
        return cls(
            shard=Shard(_count(index), _count(count)),
            targets=_texts(doc["targets"]),
            findings=[_unfinding(f) for f in _rows(doc["findings"])],
            errors=[ScanError(_text(p), _text(m)) for p, m in _rows(doc["errors"])],
            stats=stats,
            notes=_texts(doc["notes"]),
            unchecked=_texts(doc["unchecked"]),
            special=[(_text(p), _text(k)) for p, k in _rows(doc["special"])],
            stale=[_unfinding(f) for f in _rows(doc["stale"])],
            paired=_count(doc["paired"]),
            run_findings=[_unfinding(f) for f in _rows(doc["run_findings"])],
            run_notes=_texts(doc["run_notes"]),
            shapes=None
            if doc["shapes"] is None
            else {(_count(h), _count(w)): _count(n) for h, w, n in _rows(doc["shapes"])},
            where=_text(doc["where"]),
            world_size=_optional_count(doc["world_size"]),
            batch_size=_optional_count(doc["batch_size"]),
            dataset=None
            if plan is None
            else PlanFacts(
                _text(plan["layout"]),
                _count(plan["items"]),
                _texts(plan["skipped"]),
                _texts(plan["notes"]),
                [
                    PlanPart(_text(layout), _optional_text(root), _text(line))
                    for layout, root, line in _rows(plan["parts"])
                ],
            ),
            host=_text(doc.get("host", "")),
            elapsed=_seconds(doc.get("elapsed_s", 0.0)),
            requests={_text(k): _count(v) for k, v in _mapping(doc.get("requests", {})).items()},
            inventory=[_inventory_fact(i) for i in _rows(doc.get("inventory") or [])],
            fingerprint=_text(doc["fingerprint"]),
            run=_text(doc["run"]),
            settings=dict(_mapping(doc.get("settings") or {})),
        )

    def line(self) -> str:
        """What this shard did, in one line (``scan -v`` on rank 0; the benchmark reads it)."""
        s = self.stats
        sent = f", {self.requests['store']} store requests" if "store" in self.requests else ""
        return (
            f"shard {self.shard.text} on {self.host}: {s.files_seen} files seen, {s.files_read - s.files_reused} read, "
            f"{s.io_bytes} bytes read{sent}, {self.elapsed:.2f} s"
        )

    def packed(self) -> bytes:
        """The part as compressed bytes, for the ranks' exchange."""
        return zlib.compress(json.dumps(self.to_json(), separators=(",", ":")).encode("utf-8"), 6)

    @classmethod
    def unpacked(cls, data: bytes) -> Part:
        return cls.from_json(json.loads(zlib.decompress(data)))


def _finding(f: Finding) -> list[Any]:
    return [f.kind, f.severity.value, f.path, f.message, f.fix.value, f.source, dict(f.details)]


def _unfinding(row: list[Any]) -> Finding:
    from cachedoctor.explain import kinds

    kind, severity, path, message, fix, source, details = row
    if kind not in kinds():  # a kind names a section of the report: only those cachedoctor has
        raise ValueError(f"{kind!r}: no such kind of finding")
    return Finding(
        _text(kind),
        Severity(severity),
        _text(path),
        _text(message),
        Fix(fix),
        _optional_text(source),
        _mapping(details),
    )


def _count(value: Any) -> int:
    """A whole number of at least 0, as JSON spells one (``true``, ``2.0``, ``1e400``: refused)."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


def _optional_count(value: Any) -> int | None:
    return None if value is None else _count(value)


def _seconds(value: Any) -> float:
    if type(value) not in (int, float) or not 0 <= value < float("inf"):
        raise ValueError(f"{value!r} is not a duration")
    return float(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _texts(value: Any) -> list[str]:
    return [_text(v) for v in _rows(value)]


def _rows(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{type(value).__name__} where a list belongs")
    return value


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{type(value).__name__} where an object belongs")
    return value


def _inventory_fact(row: Any) -> list[Any]:
    """``[manifest, date, folders re-listed or None, [targets it listed nothing under]]``."""
    manifest, date, relisted, uncovered = _rows(row)
    return [_text(manifest), _text(date), _optional_count(relisted), _texts(uncovered)]


def _dataset(plan: PlanFacts) -> dict[str, Any]:
    return {
        "layout": plan.layout,
        "items": plan.items,
        "skipped": list(plan.skipped),
        "notes": list(plan.notes),
        "parts": [list(p) for p in plan.parts],
    }


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def hostname() -> str:
    """``socket.gethostname()``, which on POSIX is the kernel's node name: ``os.uname`` gives it
    without importing ``socket`` (a few ms of every run's start-up)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


__all__ = ["PART_SCHEMA", "Part", "PlanFacts", "PlanPart", "hostname"]
