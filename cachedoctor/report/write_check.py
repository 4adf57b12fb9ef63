"""What repair's write-time scale check said (``repair/peer_scale.py``), for the text and the
JSON alike: the recomputes it refused, the ones it wrote without judging (too few peers), and
how a kind that got worse anyway is worded.

"please report this" is kept for what no check explains: every write is judged first, so a kind
with more files after the repair is an internal error, except a ``distribution-outlier`` among
files written where too few healthy peers were there to judge them by.
"""

from __future__ import annotations

from typing import Any


def refused(outcome: Any) -> list[tuple[str, str]]:
    """Recomputes refused before they replaced anything (off their peers' scale): ``(path, line)``."""
    from cachedoctor.repair.peer_scale import REFUSED

    if outcome is None:
        return []
    return [(r.path, r.message) for r in outcome.results if r.message.startswith(REFUSED)]


def unjudged(outcome: Any) -> list[tuple[str, str]]:
    """Recomputed files written without a judgement of their scale (too few healthy peers, so
    the scan would not judge them either): ``(path, why)``."""
    from cachedoctor.repair.peer_scale import UNJUDGED

    if outcome is None:
        return []
    return [
        (r.path, r.message.split("; ", 1)[1])
        for r in outcome.results
        if r.state.value == "verified" and "; " + UNJUDGED in r.message
    ]


def worse_why(kind: str, unjudged: list[tuple[str, str]]) -> str:
    """The end of the ``worse:`` line of ``kind``."""
    if kind == "distribution-outlier" and unjudged:
        return "; written where too few healthy peers were there to judge it: check the --encoder"
    return "; please report this"


__all__ = ["refused", "unjudged", "worse_why"]
