"""Judge a file repair is about to put in place with the checks the next scan will run on it.

A repair must never write a file its own scan would reject. So the new content, still under
its temp name beside the target, is read deep (a lossless rewrite's from the bytes it just
wrote, in memory) and judged by every rule: the file checks (CRCs,
NaN/Inf, device tags, leaks), the peer checks among the entry's healthy neighbours (rank,
channels, dtype: what catches an encoder whose latents have 3 channels where the cache has 4),
and the dataset checks against what the layout expects of the entry (the bucket's size). Any
finding and the rename does not happen: the old file (or the gap) stays as it was. A recompute
is judged against its peers' distribution too (``peer_scale.py``: the wrong VAE or scaling is
refused before it replaces anything, with one line naming the encoder).

Peers are read quick, once per worker and file version (``lru_cache`` on path, size, mtime).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState
from cachedoctor.repair.peer_scale import REFUSED, UNNAMED, EncoderUsed, judge_scale, peer_entry

if TYPE_CHECKING:
    from cachedoctor.checks import PeerEntry
    from cachedoctor.findings import Finding
    from cachedoctor.scan.outcome import Outcome


def problems_of(
    action: Action,
    temp: str,
    data: bytes | None = None,
    *,
    encoder: EncoderUsed = UNNAMED,
    notes: list[str] | None = None,
    scale: bool = True,
    found_fit: list[Outcome] | None = None,
) -> str | None:
    """What the scan would find wrong with ``temp`` once it is ``action.path`` (``None``: nothing).
    With ``data``, the bytes just written to ``temp``, they are judged in memory as the file at
    ``action.path`` (:func:`cachedoctor.scan.inspect_bytes`) instead of reading ``temp`` back.
    A recompute is also judged against its peers' scale (``peer_scale.py``; ``encoder``: the
    ``--encoder`` it was made with, and its scaling): an outlier's answer starts with
    :data:`REFUSED` and is the item's whole line; what could not be judged (too few peers) is
    appended to ``notes``. ``scale=False``: not that (``recover`` reading back a version
    already in place, maybe the trainer's: the final scan judges it). ``found_fit`` gets the
    outcome of ``data`` judged fit (``verdicts.py``: the rescan's verdict on them)."""
    if data is not None:
        from cachedoctor.scan import inspect_bytes

        outcome = inspect_bytes(action.path, data)
    else:
        from cachedoctor.scan import inspect_file

        outcome = inspect_file(temp, deep=True, unsaved=True)
    if outcome.status != "read":
        return f"cannot be read back ({outcome.error or 'not a cache file'})"
    found = list(outcome.findings)
    spec = action.spec
    if spec is not None and outcome.format != spec.container_format:  # the layout's container, never another
        return f"is a {outcome.format or 'unknown'} file where the layout writes {spec.container_format}"
    if spec is not None:
        found += _among_peers(outcome, action.path, spec.peers)
        found += _against_entry(outcome, action)
        shape = dict(outcome.shapes).get(spec.key)
        hw = spec.latent_hw if spec.role == "latent" else None
        if hw is not None and (shape is None or tuple(shape[-2:]) != tuple(hw)):
            got = list(shape) if shape is not None else "nothing"
            return f"holds {spec.key or '<root>'} {got}, where the layout expects [..., {hw[0]}, {hw[1]}]"
    if not found and scale and action.kind is ActionKind.RECOMPUTE:
        verdict = judge_scale(outcome, action, encoder)
        if verdict.note and notes is not None:
            notes.append(verdict.note)
        return verdict.refusal
    if not found:
        if found_fit is not None and data is not None:  # (read from ``temp``, it names the temp file)
            found_fit.append(outcome)
        return None
    return "would be reported: " + "; ".join(f"{f.kind}: {f.message}" for f in found)


def unfit_line(problem: str, what: str = "file") -> str:
    """The outcome of an item whose new content was not put in place: a refusal is its own line."""
    return problem if problem.startswith(REFUSED) else f"not written: the new {what} {problem}"


def with_notes(result: ItemResult, notes: list[str]) -> ItemResult:
    """A written item's result with what could not be judged (``problems_of``'s ``notes``)."""
    if result.state is not ItemState.VERIFIED or not notes:
        return result
    from dataclasses import replace

    return replace(result, message=f"{result.message}; {notes[0]}")


def _among_peers(outcome: Outcome, path: str, peers: tuple[str, ...]) -> list[Finding]:
    from cachedoctor.checks import PEER_CHECKS, PeerGroup

    if outcome.group is None or outcome.peer is None:
        return []
    entries: list[PeerEntry] = []
    for peer in peers:
        if peer == path:
            continue
        record = peer_entry(peer, deep=False)
        if record is not None and record[0] == outcome.group:
            entries.append(record[1])
    if not entries:
        return []
    group = PeerGroup(os.path.dirname(path), (*entries, outcome.peer))
    return [f for check in PEER_CHECKS for f in check.check_peers(group) if f.path == outcome.path]


def _against_entry(outcome: Outcome, action: Action) -> list[Finding]:
    from cachedoctor.checks import ENTRY_CHECKS, Found
    from cachedoctor.layouts.interface import Expected

    spec = action.spec
    if spec is None:
        return []
    expected = Expected(
        outcome.path,
        spec.source,
        spec.role,
        latent_hw=spec.latent_hw if spec.role == "latent" else None,
        latent_key=spec.key if spec.role == "latent" else None,
    )
    found = Found(outcome.path, outcome.mtime_ns, outcome.shapes, outcome.values)
    return [f for check in ENTRY_CHECKS for f in check.check_entry(expected, found) if f.path == outcome.path]
