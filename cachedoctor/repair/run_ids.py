"""Naming a quarantine run: its whole id, ``latest``, or a unique prefix of it (as git takes a
commit), for every command that takes a run, local or s3:// (``quarantine list|restore|purge``).

A run id is ``YYYYmmdd-HHMMSS-xxxxxx`` (a restore's aside run: ``restore-`` before it), so the
newest is the greatest once that word is set aside. A prefix may be typed with or without the
dashes (``2026-11-28`` names ``20261128-...``). Anything else is one line, exit 2: an ambiguous
prefix names its candidates, an unknown one says where it was looked for.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from cachedoctor.errors import PathError

LATEST = "latest"
_RESTORE = "restore-"
_SHOWN = 8  # candidates an ambiguous prefix lists before "and N more"


def _stamp(run_id: str) -> str:
    return run_id.removeprefix(_RESTORE)


def _squash(text: str) -> str:
    return "".join(c for c in text if c not in "-_: ")


def run_time(run_id: str) -> str | None:
    """``2026-11-28 06:30:00`` from the id (local time, as the repair wrote it), or ``None``."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.strptime(_stamp(run_id)[:15], "%Y%m%d-%H%M%S"))
    except ValueError:
        return None


def resolve_run(given: str, ids: Iterable[str], where: str) -> str:
    """The one run id among ``ids`` that ``given`` names; :class:`PathError` on ``where`` otherwise."""
    known = sorted(set(ids))
    if given in known:
        return given
    if given == LATEST:
        if not known:
            raise PathError(where, "no quarantine run here or below, so none is the latest")
        return max(known, key=lambda r: (_stamp(r), r))
    squashed = _squash(given)
    matches = [r for r in known if r.startswith(given) or (squashed and _squash(r).startswith(squashed))]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise PathError(where, f"no quarantine run {given!r} here or below; see `cachedoctor quarantine list`")
    shown = ", ".join(matches[:_SHOWN]) + (f" and {len(matches) - _SHOWN} more" if len(matches) > _SHOWN else "")
    raise PathError(where, f"{given!r} names {len(matches)} quarantine runs: {shown}; give more of the id")


__all__ = ["LATEST", "resolve_run", "run_time"]
