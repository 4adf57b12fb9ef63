"""What ``repair`` would do with a scan's findings, for the scan's closing line.

The scan plans the repair exactly as ``repair`` would (``planner.plan_repair``), assuming the
encoders are given, so its last line can say how many files repair can fix and how many it
would block, and why, instead of promising a fix the planner then refuses. Planning reads a
few healthy peers' metadata per folder (the templates), never tensor data; past
:data:`PREVIEW_LIMIT` files with findings the scan keeps to counting fixes per kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cachedoctor.findings import Finding
from cachedoctor.layouts.interface import Expected

if TYPE_CHECKING:
    from cachedoctor.layouts import LayoutOf

PREVIEW_LIMIT = 20_000
_ROLE = {"latent": "images", "text": "captions"}


@dataclass(frozen=True)
class RepairPreview:
    fixable: dict[str, int] = field(default_factory=dict)  # action -> files ("recompute" needs --encoder)
    encoders: tuple[str, ...] = ()  # what the recomputes encode: "images", "captions"
    blocked: dict[str, int] = field(default_factory=dict)  # why -> files
    needs_person: int = 0

    def sentence(self) -> str:
        parts = []
        total = sum(self.fixable.values())
        if total:
            what = ", ".join(f"{n} to {kind}" for kind, n in self.fixable.items())
            if "recompute" in self.fixable:
                what += f" (with --encoder for {' and '.join(self.encoders)})"
            parts.append(f"`cachedoctor repair` can fix {total} file(s): {what}.")
        if self.blocked:
            why = "; ".join(f"{n}: {reason}" for reason, n in self.blocked.items())
            parts.append(f"It would leave {sum(self.blocked.values())} file(s) as they are ({why}).")
        if self.needs_person:
            parts.append(f"{self.needs_person} file(s) need a person: two dataset items map to one file.")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "fixable": dict(self.fixable),
            "blocked": dict(self.blocked),
            "needs_person": self.needs_person,
            "encoders": list(self.encoders),
        }


def preview(
    findings: Iterable[Finding],
    roots: list[str],
    expected_for: Callable[[set[str]], dict[str, list[Expected]]],
    layout: LayoutOf,
) -> RepairPreview | None:
    """The repair plan's counts for these findings (``None`` past :data:`PREVIEW_LIMIT` files).
    ``expected_for(paths)`` gives the dataset's entries for those paths; it is called only when
    there is something to plan."""
    findings = list(findings)
    paths = {f.path for f in findings}
    if not findings or len(paths) > PREVIEW_LIMIT:
        return None
    from cachedoctor.repair.planner import plan_repair  # (here: a clean scan does not import it)

    plan = plan_repair(findings, roots, expected_for(paths) if layout else {}, layout, {"image", "text"})
    fixable: Counter[str] = Counter()
    blocked: Counter[str] = Counter()
    roles: set[str] = set()
    for action in plan.actions:
        if action.blocked:
            blocked[action.blocked] += 1
            continue
        fixable[action.kind.value] += 1
        if action.spec is not None:
            roles.add(_ROLE.get(action.spec.role, action.spec.role))
    return RepairPreview(
        dict(sorted(fixable.items())), tuple(sorted(roles)), dict(blocked.most_common()), len(plan.needs_person)
    )
