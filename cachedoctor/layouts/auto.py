"""``--layout auto``: which layout fits which part of the targets.

A tree may mix trainers (a kohya image folder beside a OneTrainer cache and plain safetensors
files), so the layout is chosen per subtree. One walk per target (``_scout.py``), bounded by
``DETECT_ENTRIES`` directory entries, asks every layout at each folder for its sign
(:meth:`Layout.claim`: a SimpleTuner config, a OneTrainer ``aggregate.pt``, a kohya latent
beside its image) and notes the folders holding cache files that no sign explains. Then:

- a target whose signs all name one layout, with no other cache files in it, is that layout's
  whole (the single line ``layout: kohya (auto: ...)``, as it has always been);
- otherwise the target is split at the smallest folders that hold one layout's signs and
  nothing else (``layout: kohya for <folder> (auto: ...)``, one line per subtree), and the
  rest is compared cache file with cache file only (``layout: none for the rest of <target>``).

A folder whose cache files carry a layout's names without its sign (a kohya cache whose images
are gone: :meth:`Layout.resembles`) does not split that layout's tree: its files are still
that layout's, and orphans. Parts the budget did not reach count as nothing: they go with the
tree around them, as detection always guessed from the first folders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from cachedoctor.layouts._scout import Scouting, inside, scout
from cachedoctor.layouts.interface import Claim, DatasetPlan, Layout, LayoutError, LayoutOptions, LayoutPart
from cachedoctor.layouts.mixed import MixedPlan

COMPARED = "cache files compared with each other only"
NONE_REASON = f"no trainer layout recognised; {COMPARED}"


@dataclass(frozen=True, slots=True)
class Subtree:
    layout: Layout
    root: str
    claim: Claim  # the first sign found in it: the reason


def split(scouting: Scouting[Layout]) -> list[Subtree]:
    """The subtrees of ``scouting.target`` that one layout has to itself (see the module doc)."""
    return _split(scouting.target, scouting.claims, scouting.foreign)


def _split(folder: str, claims: list[tuple[Layout, Claim]], foreign: list[tuple[str, frozenset[str]]]) -> list[Subtree]:
    if not claims:
        return []
    layout, first = claims[0]
    if first.root == folder:
        return [Subtree(layout, folder, first)]  # the claim of this very folder: nothing else is in it
    alone = all(c[0].name == layout.name for c in claims) and all(layout.name in f[1] for f in foreign)
    if alone and (layout.plans_below or first.root == folder):
        return [Subtree(layout, folder, first)]
    children: dict[str, tuple[list, list]] = {}
    for claim in claims:
        children.setdefault(_child(folder, claim[1].root), ([], []))[0].append(claim)
    for item in foreign:
        if item[0] != folder:  # cache files right in this folder: the rest, layout none
            children.setdefault(_child(folder, item[0]), ([], []))[1].append(item)
    return [sub for child in sorted(children) for sub in _split(child, *children[child])]


def _child(folder: str, path: str) -> str:
    """The folder right below ``folder`` on the way to ``path``."""
    return os.path.join(folder, os.path.relpath(path, folder).split(os.sep)[0])


def _rest(scouting: Scouting[Layout], subtrees: list[Subtree]) -> bool:
    """Whether some of the target is no subtree's: cache files outside them, or not looked at."""
    if not subtrees or scouting.exhausted:
        return True
    return any(not any(inside(f, s.root) for s in subtrees) for f, _ in scouting.foreign)


def _part(sub: Subtree, options: LayoutOptions) -> tuple[LayoutPart, DatasetPlan | None]:
    """One subtree's plan and line. A description found below the targets that cannot be used
    (a config template, a dataset on another machine) leaves its part to layout none, with the
    reason: the user did not name it, so it does not stop the scan of everything else."""
    sign = f"{os.path.relpath(sub.claim.marker, sub.root)} {sub.claim.sign}"
    try:
        plan = sub.layout.plan([sub.root], options)
    except LayoutError as exc:
        line = f"layout: none for {sub.root} (auto: {sign}, but {exc}; {COMPARED})"
        return LayoutPart("none", sub.root, line), None
    return LayoutPart(sub.layout.name, sub.root, f"layout: {sub.layout.name} for {sub.root} (auto: {sign})"), plan


def plan_auto(targets: list[str], options: LayoutOptions, layouts: Sequence[Layout]) -> tuple[DatasetPlan | None, str]:
    """The plan ``--layout auto`` makes of ``targets`` and its layout line(s)."""
    scoutings = [scout(t, layouts) for t in targets]
    found = [(s, split(s)) for s in scoutings]
    if not any(subtrees for _, subtrees in found):
        return None, f"layout: none (auto: {NONE_REASON})"
    whole = [subtrees[0] for s, subtrees in found if len(subtrees) == 1 and subtrees[0].root == s.target]
    if len(whole) == len(targets) and len({w.layout.name for w in whole}) == 1:
        layout = whole[0].layout
        line = f"layout: {layout.name} (auto: {whole[0].claim.reason})"
        plan = layout.plan(targets, options)
        plan.parts = [LayoutPart(layout.name, t, line) for t in targets]
        return plan, line
    parts: list[tuple[LayoutPart, DatasetPlan | None]] = []
    for scouting, subtrees in found:
        for sub in subtrees:
            parts.append(_part(sub, options))
        if _rest(scouting, subtrees):
            where = f"the rest of {scouting.target}" if subtrees else scouting.target
            line = f"layout: none for {where} (auto: {NONE_REASON})"
            parts.append((LayoutPart("none", scouting.target, line), None))
    lines = "\n".join(part.line for part, _ in parts)
    if all(plan is None for _, plan in parts):
        return None, lines  # every description found was unusable: cache files only, and why
    return MixedPlan.of(targets, parts), lines


__all__ = ["NONE_REASON", "Scouting", "Subtree", "plan_auto", "scout", "split"]
