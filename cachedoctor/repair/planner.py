"""From the scan's findings to one action per path (check before writing, as black does).

Per path, the strongest cure wins: an own temp file is cleaned up; anything that needs its data
made again is recomputed (its old file, if any, goes to the quarantine); what should not be in
the cache is quarantined; a leaked view is cloned; a device tag is rewritten. A name collision
needs a person. A recompute that cannot be done here (no encoder for its role, an unknown
source, a size the layout does not record) is planned as *blocked*, with the reason, and
changes nothing, except for a file the trainer cannot load: an unsafe pickle, or an archive it
cannot read (``corrupt-archive``), is moved to the quarantine instead, so the trainer re-caches
the item rather than stopping on it (sd-scripts re-raises ``BadZipFile`` on a cached file it
cannot open). ``keep_blocked`` keeps unreadable files in place; an unsafe pickle always goes.
What a recompute must write is the layout's to say (``Layout.recompute_spec``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable

from cachedoctor.atomic import is_own_temp
from cachedoctor.cachenames import shard_index
from cachedoctor.findings import Finding, Fix
from cachedoctor.layouts import LayoutOf, TemplateFinder, recaches_missing, recompute_spec
from cachedoctor.layouts.interface import Expected
from cachedoctor.repair.model import Action, ActionKind, RecomputeSpec, RepairPlan, Stat

_KIND_FOR_FIX = {
    Fix.CLONE_STORAGE: ActionKind.CLONE_STORAGE,
    Fix.REWRITE_CPU: ActionKind.REWRITE_CPU,
    Fix.QUARANTINE: ActionKind.QUARANTINE,
    Fix.RECOMPUTE: ActionKind.RECOMPUTE,
}
_ORDER = (Fix.RECOMPUTE, Fix.QUARANTINE, Fix.CLONE_STORAGE, Fix.REWRITE_CPU)
#: Kinds whose file must leave the cache even when it cannot be made again: loading it runs code
#: or stalls the trainer.
_DANGEROUS = frozenset({"unsafe-pickle", "read-timeout"})
#: Kinds whose file the trainer cannot load: quarantined when not made again, unless --keep-blocked.
_UNLOADABLE = frozenset({"corrupt-archive", "broken-link"})


def root_of(path: str, roots: list[str]) -> str:
    """The cache root holding ``path`` (its quarantine and journal live there)."""
    best = None
    for root in roots:
        base = root if os.path.isdir(root) else os.path.dirname(root)
        inside = path == base or path.startswith(base.rstrip(os.sep) + os.sep)
        if inside and (best is None or len(base) > len(best)):
            best = base
    return best or os.path.dirname(path)


def plan_repair(
    findings: Iterable[Finding],
    roots: list[str],
    expected: dict[str, list[Expected]],
    layout: LayoutOf,
    modalities: set[str],
    only: Collection[str] | None = None,
    keep_blocked: bool = False,
    stat_of: Callable[[str], Stat | None] = Stat.of,
    templates: TemplateFinder | None = None,
) -> RepairPlan:
    """``expected`` maps cache path -> the dataset's entries for it (empty without a layout),
    ``layout`` names the layout that planned them (``DatasetPlan.layout_for``: per path);
    ``modalities`` says which encoders were given (``image``, ``text``). ``stat_of`` says what
    is at a path now (a remote cache's planner passes what its listing saw of each object);
    ``templates`` finds the healthy peers a recompute copies (remote folders: ``store_recompute.py``)."""
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:  # (a dead repair's own temp file is in every scope: it holds no user data)
        if only is None or finding.kind in only or is_own_temp(os.path.basename(finding.path)):
            by_path[finding.path].append(finding)
    plan = RepairPlan()
    if templates is None:
        templates = TemplateFinder(set(by_path))
    dropped: dict[str, tuple[set[str], set[int]]] = {}  # a shard folder's index -> (kinds, flagged items)
    for path in sorted(by_path):
        group = by_path[path]
        kinds = tuple(sorted({f.kind for f in group}))
        index = shard_index(path)
        if index is not None and "orphan-entry" not in kinds:
            _drop(dropped, index, group)
            continue
        fixes = {f.fix for f in group}
        source = next((f.source for f in group if f.source), None)
        before = stat_of(path)
        root = root_of(path, roots)
        if is_own_temp(os.path.basename(path)):
            if before is None:
                continue
            plan.actions.append(Action(ActionKind.CLEANUP, path, root, kinds, None, before))
            continue
        if "name-collision" in kinds:
            plan.needs_person.append(path)
            continue
        if "orphan-entry" in kinds:
            fixes = {Fix.QUARANTINE}  # no item wants it: whatever else is wrong with it, it goes
        entries = expected.get(path) or []
        if entries and fixes & {Fix.QUARANTINE} and "orphan-entry" not in kinds and "partial-write" not in kinds:
            fixes = {Fix.RECOMPUTE}  # an unsafe pickle the dataset expects: quarantined and made again
        fix = next((f for f in _ORDER if f in fixes), None)
        if fix is None:
            continue
        kind = _KIND_FOR_FIX[fix]
        if before is None and kind is not ActionKind.RECOMPUTE:
            continue  # gone since the scan (another repair or the trainer moved it): nothing to do
        spec: RecomputeSpec | None = None
        blocked = None
        if kind is ActionKind.RECOMPUTE:
            spec, blocked = recompute_spec(path, entries[0] if entries else None, layout, templates)
            if spec is not None and spec.role not in _roles(modalities):
                blocked = f"needs an encoder for {'captions' if spec.role == 'text' else 'images'} (--encoder)"
            leave = _DANGEROUS if keep_blocked else _DANGEROUS | _UNLOADABLE
            recached = not keep_blocked and recaches_missing(path, layout)  # the trainer makes it again
            if blocked is not None and (recached or leave & set(kinds)) and before is not None:
                # never left where a trainer loads it: moved out, so the trainer re-caches the item
                plan.actions.append(Action(ActionKind.QUARANTINE, path, root, kinds, source, before, note=blocked))
                continue
        plan.actions.append(Action(kind, path, root, kinds, source, before, spec, blocked))
    if dropped:  # the index's own missing-entry (an item it does not list) the trainer re-caches with the rest
        plan.actions = [a for a in plan.actions if a.path not in dropped]
    for index, (kinds_, items) in sorted(dropped.items()):
        before = stat_of(index)
        if before is not None:
            if UNREADABLE_INDEX in items:  # the index itself: nothing to cut, the folder is set aside
                note: str | None = UNREADABLE_INDEX_NOTE
            else:
                note = "items " + ", ".join(str(i) for i in sorted(items)) if items else None
            reasons = tuple(sorted(kinds_))
            plan.actions.append(
                Action(ActionKind.DROP_ITEMS, index, root_of(index, roots), reasons, None, before, note=note)
            )
    return plan


def _drop(dropped: dict[str, tuple[set[str], set[int]]], index: str, group: list[Finding]) -> None:
    """A diffusion-pipe shard's findings: its folder's index is cut before the first bad item
    (``shards.py``). Items the scan names (a stale image) are flagged; damage is found again
    there by reading every item. A leak or a device tag needs nothing: its only loader maps
    every item to the cpu and loads a view as it is."""
    needs = [f for f in group if f.fix not in (Fix.CLONE_STORAGE, Fix.REWRITE_CPU, Fix.NONE)]
    if not needs:
        return
    kinds, items = dropped.setdefault(index, (set(), set()))
    for finding in needs:
        kinds.add(finding.kind)
        items.update(finding.items())
        if finding.details.get("problem") == "bad-index":
            items.add(UNREADABLE_INDEX)


#: An item number no index has: ``_drop``'s mark for a folder whose index does not read.
UNREADABLE_INDEX = -1
UNREADABLE_INDEX_NOTE = "index unreadable"


def _roles(modalities: set[str]) -> set[str]:
    return {"latent" if m == "image" else "text" for m in modalities}
