"""Judge a recomputed latent against its healthy peers' distribution before it replaces anything.

A latent made with the wrong VAE or the wrong scaling has the right shape, dtype and CRC: only
its values, next to its peers', give it away (``distribution-outlier``). The scan judges a
folder's latents after the fact; a repair must not write one the next scan would flag, so the
candidate is judged here by the scan's own rule (:meth:`DistributionOutlier.outliers`, the one
function both call) among up to :data:`PEER_SAMPLE` healthy latents of its folder and structure,
read deep once per worker and file version. An outlier is refused with one line naming the
image, the encoder as given to ``--encoder`` and the likely cause; nothing is replaced.

Like the scan, fewer than ``MIN_PEERS`` latents are not judged (a cache of one file must still
be repairable): the item is written and its outcome says it was not judged. Where the layout
knows the factors the trainer applied (``spec.scaling``) and the encoder reports its own, a
factor off by more than the rule's ``MIN_FACTOR`` is said in that note too: a hint, not a
refusal, since a manifest's trainer may apply any factor and repair applies it as written.

Peers: the ones the plan named (``spec.peers``: the healthy neighbours, local copies for a
remote cache), then, for a folder on this disk, its other files in name order. Lossless
rewrites keep every value as it was, so only recomputes are judged here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cachedoctor.checks import PeerEntry
    from cachedoctor.encoders.interface import Scaling
    from cachedoctor.findings import Finding
    from cachedoctor.repair.model import Action
    from cachedoctor.scan.outcome import Outcome

#: Healthy peers read at most per judgement (the robust median and MAD settle well before).
PEER_SAMPLE = 64
#: Files of a folder looked at, at most, to find them (a folder of broken files stays cheap).
_TRIES = 4 * PEER_SAMPLE
#: Where a refusal's line starts: the whole line is the item's outcome (``unfit_line``).
REFUSED = "refused: "
#: What a written item's result says when too few peers were there to judge it by.
UNJUDGED = "not judged against its peers' scale"


class EncoderUsed(NamedTuple):
    """The encoder a candidate was made with: ``given``, its ``--encoder`` as written (the
    refusal names it), and ``scaling``, the ``(factor, shift)`` it reports (``None``: none)."""

    given: str = ""
    scaling: tuple[float, float] | None = None

    @classmethod
    def of(cls, given: str, scaling: Scaling) -> EncoderUsed:
        """An adapter that reports the identity reports nothing (the interface's default)."""
        factors = (scaling.factor, scaling.shift)
        return cls(given, None if factors == (1.0, 0.0) else factors)


UNNAMED = EncoderUsed()


@dataclass(frozen=True, slots=True)
class ScaleVerdict:
    """``refusal``: the outcome's line when the candidate is off its peers; ``note``: the line
    saying it could not be judged (too few peers); both ``None``: judged and fine."""

    refusal: str | None = None
    note: str | None = None


def judge_scale(outcome: Outcome, action: Action, encoder: EncoderUsed = UNNAMED) -> ScaleVerdict:
    """The candidate ``outcome`` (its deep read) for ``action.path`` among its healthy peers."""
    from cachedoctor.checks.distribution_outlier import MIN_FACTOR, MIN_PEERS, DistributionOutlier, samples_of

    spec = action.spec
    mine = outcome.peer
    if spec is None or spec.role != "latent" or mine is None or not mine.stats or outcome.group is None:
        return ScaleVerdict()
    peers = healthy_peers(action.path, outcome.group, spec.peers)
    families = samples_of((*peers, mine))
    for key, stats in mine.stats:
        family = families[(key, len(stats) // 8)]
        if len(family) < MIN_PEERS:
            note = f"{UNJUDGED}: {len(family) - 1} healthy peer(s) read, {MIN_PEERS - 1} needed"
            return ScaleVerdict(note=note + _off_expected(spec.scaling, encoder, MIN_FACTOR))
    for finding in DistributionOutlier().outliers((*peers, mine)):
        if finding.path == mine.path:
            return ScaleVerdict(refusal=_refusal(action, encoder.given, finding, mine, peers))
    return ScaleVerdict()


def healthy_peers(path: str, group: str, named: tuple[str, ...]) -> tuple[PeerEntry, ...]:
    """Up to :data:`PEER_SAMPLE` files of ``path``'s folder and structure (``group``) that a
    deep read finds nothing wrong with: ``named`` first, then the folder's files."""
    out: list[PeerEntry] = []
    seen = {path}
    tries = 0
    for peer in (*named, *_listing(os.path.dirname(path))):
        if peer in seen:
            continue
        seen.add(peer)
        tries += 1
        record = peer_entry(peer)
        if record is not None and record[0] == group:
            out.append(record[1])
            if len(out) >= PEER_SAMPLE:
                break
        if tries >= _TRIES:
            break
    return tuple(out)


@lru_cache(maxsize=64)
def _listing(folder: str) -> tuple[str, ...]:
    """A local folder's cache files in name order, once per worker (a bucket's: nothing here);
    by name, as the scan tells them (``claims_cache``), so a kohya folder's images and captions
    are not read as candidates and do not use up the tries."""
    from cachedoctor.cachenames import claims_cache

    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return ()
    return tuple(os.path.join(folder, n) for n in names if not n.startswith(".") and claims_cache(n))


def peer_entry(path: str, deep: bool = True) -> tuple[str, PeerEntry] | None:
    """``(group, entry)`` of a healthy file at ``path`` (``None``: gone, unreadable or with a
    finding), read once per worker and file version; ``deep`` for its channel statistics (the
    scale judgement), quick for its structure (verify's peer checks)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _read_at(path, st.st_size, st.st_mtime_ns, deep) if os.path.isfile(path) else None


@lru_cache(maxsize=4096)
def _read_at(path: str, size: int, mtime_ns: int, deep: bool) -> tuple[str, PeerEntry] | None:
    from cachedoctor.scan import inspect_file

    outcome = inspect_file(path, deep=deep)
    if outcome.status != "read" or outcome.findings or outcome.group is None or outcome.peer is None:
        return None
    return outcome.group, outcome.peer


def _refusal(action: Action, encoder: str, finding: Finding, mine: PeerEntry, peers: tuple[PeerEntry, ...]) -> str:
    """One line: the image, the candidate's std against its peers', the encoder, the likely cause."""
    from cachedoctor.checks.distribution_outlier import typical_std

    label = finding.details.get("key")
    key = next((t.key for t in mine.tensors if t.label == label and t.key in dict(mine.stats)), mine.stats[0][0])
    own = typical_std(dict(mine.stats)[key])
    theirs = sorted(typical_std(s) for p in peers for k, s in p.stats if k == key)
    mid = _median(theirs)
    spread = 1.4826 * _median([abs(x - mid) for x in theirs])
    cause = finding.message.split(": ")[-1].rstrip("?")  # the scan's guess: "unscaled latents", "another VAE"...
    blame = f"the encoder {encoder or 'given'} may be the wrong VAE or scaling for this cache"
    if "blank" in cause:  # a blank image makes a flat latent whatever the encoder
        blame = f"is the image blank? If not, {blame}"
    return (
        f"{REFUSED}recomputed latent for {_source(action)} is off its peers' scale (std {own:.3g} vs peers "
        f"{mid:.3g}±{spread:.2g}; {cause}?): {blame}; nothing replaced"
    )


def _off_expected(expected: tuple[float, float] | None, encoder: EncoderUsed, apart: float) -> str:
    """The end of the note when the encoder's own factor is ``apart`` or more off the one the
    layout says the trainer applied: a hint, never a refusal (a manifest's trainer may apply
    any factor, and repair applies it as written)."""
    if expected is None or encoder.scaling is None or not expected[0] > 0 < encoder.scaling[0]:
        return ""
    if 1 / apart < encoder.scaling[0] / expected[0] < apart:
        return ""
    return (
        f"; the encoder {encoder.given or 'given'} scales by {encoder.scaling[0]:.5g} where the layout says the "
        f"trainer scaled by {expected[0]:.5g}: is it this cache's VAE?"
    )


def _source(action: Action) -> str:
    spec = action.recompute
    return os.path.basename(spec.source) if spec.source else os.path.basename(action.path)


def _median(xs: list[float]) -> float:
    ordered = sorted(xs)
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


__all__ = [
    "PEER_SAMPLE",
    "REFUSED",
    "UNJUDGED",
    "UNNAMED",
    "EncoderUsed",
    "ScaleVerdict",
    "healthy_peers",
    "judge_scale",
]
