"""A plan of targets that mix trainers: each part's own layout plan, the rest cache only.

:class:`MixedPlan` is one :class:`DatasetPlan` to the scan and to repair: its ``expected``
entries are every part's (moved in, not copied), and what depends on the layout (which folders
a layout owns, which names are entries, which are the dataset's own files, which layout makes
an entry again) is answered by the part whose folder holds the path. A folder no part holds is
compared cache file with cache file only, as with ``--layout none``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from cachedoctor.layouts.interface import DatasetPlan, LayoutPart

#: ``plan.layout`` of a plan that mixes layouts (``parts`` says which part got which).
MIXED = "mixed"


@dataclass(slots=True)
class MixedPlan(DatasetPlan):
    owners: dict[str, DatasetPlan] = field(default_factory=dict)  # a part's folder, or a root its plan walks -> plan
    _last: tuple[str, DatasetPlan | None] | None = None  # the last folder looked up: files come folder by folder

    @classmethod
    def of(cls, targets: list[str], parts: Iterable[tuple[LayoutPart, DatasetPlan | None]]) -> MixedPlan:
        """One plan for ``targets`` from each part's plan (``None``: a part with no layout)."""
        mixed = cls(MIXED, list(targets))
        suffixes: set[str] = set()
        for part, plan in parts:
            mixed.parts.append(part)
            if plan is None:
                continue
            for root in ([part.root] if part.root else []) + [os.path.normpath(r) for r in plan.roots]:
                mixed.owners.setdefault(root, plan)
                if not any(root == t or root.startswith(t.rstrip(os.sep) + os.sep) for t in mixed.roots):
                    mixed.roots.append(root)  # a folder a config names outside the targets
            for folder, entries in plan.expected.items():
                into = mixed.expected.setdefault(folder, {})
                for path, found in entries.items():
                    into.setdefault(path, []).extend(found)
            plan.expected.clear()  # moved, not copied: a scan consumes them folder by folder
            mixed.items += plan.items
            mixed.notes.extend(f"{part.root}: {note}" for note in plan.notes)  # which part it is about
            mixed.skipped.extend(plan.skipped)
            mixed.hazards.extend(plan.hazards)
            suffixes.update(plan.source_suffixes)
        mixed.source_suffixes = tuple(sorted(suffixes))
        return mixed

    def owner(self, folder: str) -> DatasetPlan | None:
        """The plan of the part holding ``folder`` (the nearest), or ``None``."""
        if self._last is not None and self._last[0] == folder:
            return self._last[1]
        at, plan = folder, None
        while plan is None:
            plan = self.owners.get(at)
            parent = os.path.dirname(at)
            if parent == at:
                break
            at = parent
        self._last = (folder, plan)
        return plan

    def owns(self, folder: str) -> bool:
        plan = self.owner(folder)
        return plan is not None and plan.owns(folder)

    def is_entry_name(self, path: str) -> bool:
        plan = self.owner(os.path.dirname(path))
        return plan is not None and plan.is_entry_name(path)

    def is_source_name(self, path: str) -> bool:
        plan = self.owner(os.path.dirname(path))
        return plan is not None and plan.is_source_name(path)

    def layout_for(self, path: str) -> str | None:
        plan = self.owner(os.path.dirname(path))
        return plan.layout if plan is not None else None


__all__ = ["MIXED", "MixedPlan"]
