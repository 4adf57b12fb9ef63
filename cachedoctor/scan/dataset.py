"""Pair what a scan found with what the dataset expects, one cache folder at a time.

The engine hands over each walked folder's files when the folder closes; expected entries of
folders the walk never reached (a cache folder that does not exist, a manifest naming files
outside the targets) are settled at the end with one ``stat`` each. Only the entry checks in
``checks/`` judge; this module only pairs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from cachedoctor.checks import ENTRY_CHECKS, Found, is_temp_name
from cachedoctor.findings import Finding
from cachedoctor.layouts.interface import DatasetPlan, Expected

#: When more than this share of at least _MASS_MIN pairings look stale by mtime alone, the
#: dataset was copied without its times (cp -r, rsync without -t), not edited item by item.
_MASS_SHARE = 0.5
_MASS_MIN = 20


class DatasetMatcher:
    def __init__(self, plan: DatasetPlan, owns: Callable[[str], bool] | None = None) -> None:
        self.plan = plan
        self.owns = owns  # a shard's folders: the entries expected elsewhere are another shard's
        self.findings: list[Finding] = []
        #: stale entries by mtime alone, and the entries paired: judged over the whole scan
        #: (every shard's) by :func:`judge_staleness`
        self.mtime_stale: list[Finding] = []
        self.paired = 0

    def close_folder(self, folder: str, found: dict[str, Found], file_findings: list[Finding]) -> list[Finding]:
        """Judge the folder's pairings; return its file findings with their dataset item filled in."""
        expected = self.plan.expected.pop(folder, {})
        owned = self.plan.owns(folder)
        sources: dict[str, str] = {}
        per_item: dict[str, dict[int, str]] = {}
        for path, item in found.items():
            entries = expected.pop(path, None)
            if entries is None:
                if owned and self.plan.is_entry_name(path) and not is_temp_name(path):
                    self._judge(None, item)
                continue
            for entry in entries:
                if entry.in_index and entry.source_exists:
                    sources.setdefault(path, entry.source)
                    items = dict(entry.hints).get("item_sources")
                    if items:
                        per_item.setdefault(path, dict(items))
                self._judge(entry, item)
        for entries in expected.values():
            for entry in entries:
                self._judge(entry, None)
        return [_with_source(f, sources, per_item) for f in file_findings]

    def finish(self) -> list[Finding]:
        """Settle the folders the walk never saw (this shard's), then return the dataset
        findings but those of :attr:`mtime_stale`."""
        for folder in sorted(self.plan.expected):
            if self.owns is not None and not self.owns(folder):
                continue
            for path, entries in sorted(self.plan.expected[folder].items()):
                item = _stat(path)
                for entry in entries:
                    self._judge(entry, item)
        self.plan.expected.clear()
        return self.findings

    def _judge(self, expected: Expected | None, found: Found | None) -> None:
        if expected is not None and found is not None and expected.in_index:
            self.paired += 1
        items = dict(expected.hints).get("item_sources") if expected is not None else None
        for check in ENTRY_CHECKS:
            for finding in check.check_entry(expected, found):
                if items:
                    finding = _item_source(finding, dict(items)) or finding
                if finding.kind == "stale-entry" and finding.details.get("by") == "mtime":
                    self.mtime_stale.append(finding)
                else:
                    self.findings.append(finding)


def judge_staleness(stale: list[Finding], paired: int) -> tuple[list[Finding], str | None]:
    """The stale-by-mtime findings of a whole scan, or none and a note when they are most of
    the pairings: a dataset copied without its file times, not edited item by item."""
    if len(stale) > _MASS_MIN and len(stale) > _MASS_SHARE * paired:
        return [], (
            f"{len(stale)} of {paired} entries are older than their sources: the dataset "
            "looks copied without its file times, so staleness by mtime was not reported; "
            "`cachedoctor manifest build` records content hashes for exact staleness"
        )
    return stale, None


def _with_source(finding: Finding, sources: dict[str, str], per_item: dict[str, dict[int, str]]) -> Finding:
    """``finding`` with its dataset item: a file's source, or, in a file of many items (a
    diffusion-pipe shard), the image of the one item the finding is about."""
    if finding.source is not None or finding.path not in sources:
        return finding
    one = _item_source(finding, per_item[finding.path]) if finding.path in per_item else None
    return one or replace(finding, source=sources[finding.path])


def _item_source(finding: Finding, images: dict[int, str]) -> Finding | None:
    """``finding`` with the image of the one item it is about, if it is about one."""
    items = finding.items()
    image = images.get(next(iter(items))) if len(items) == 1 else None
    return replace(finding, source=image) if image is not None else None


def _stat(path: str) -> Found | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return Found(path, st.st_mtime_ns) if os.path.isfile(path) else None


__all__ = ["DatasetMatcher", "judge_staleness"]
