"""Put new bytes in place of one file, crash-safe: the steps every replacement takes, and what a
failure of one file means.

The order of every replacement is what makes a crash harmless at any instant:

1. the new bytes go to a temp file beside the target and are fsynced;
2. the temp file is read back with the safe reader and judged by every check the next scan
   will run on it (``verify.py``: CRCs, NaN/Inf, its peers' channels and dtypes, the bucket's
   size; a recompute, its peers' scale); if any fails, the temp file is removed and nothing
   else happens;
3. the old file is hard-linked into the quarantine (it is still in place too);
4. the temp file is renamed over the target, and the folder fsynced.

Killed before 4, the old file is still in place (and maybe also in the quarantine); killed after
4, the new one is, and the old one is in the quarantine. The next run re-plans from a fresh
scan and the journal, so whatever is still broken is done again.

Why a module of its own: both a one-file action (``replace.py``) and a diffusion-pipe index cut
(``shards.py``, which ``replace.run_action`` hands its actions to) take these steps; here they
sit below both, so neither imports the other back.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from cachedoctor.atomic import atomic_binary, temp_prefix_for
from cachedoctor.lifetime import kill_due, kill_self, reraise_interrupt
from cachedoctor.repair.model import Action, ItemResult, ItemState, NotRewritable, RepairError
from cachedoctor.repair.quarantine import Quarantine


def crash_point(name: str) -> None:
    """A named point in a repair; with ``CACHEDOCTOR_TEST_KILL_AT=N`` the N-th one SIGKILLs the
    process, so crash tests can stop a real repair between any two durable steps
    (``CACHEDOCTOR_TEST_KILL_AT_POINT=NAME``: the first point of that name)."""
    if kill_due("CACHEDOCTOR_TEST_KILL_AT") or os.environ.get("CACHEDOCTOR_TEST_KILL_AT_POINT") == name:
        kill_self()


def disk_full(path: str, exc: OSError) -> RepairError:
    return RepairError(
        path,
        f"no space left on the device ({exc.strerror}); nothing was replaced. "
        "Free some space, then run the same `cachedoctor repair` again: it resumes",
    )


class Unfit(Exception):
    """The new content would not pass the scan: it is not put in place."""


def replace_file(
    path: str,
    data: bytes,
    quarantine: Quarantine,
    action: Action,
    judge: Callable[[Action, str], str | None] | None = None,
) -> str | None:
    """Steps 1-3 above, with the new file judged (``judge(action, temp_path)``) before anything
    else changes: :class:`Unfit` leaves the old file (or the gap) as it was. Returns where the
    old file went (``None`` when there was none)."""
    kept: list[str] = []

    def keep_old(temp: str) -> None:
        problem = judge(action, temp) if judge is not None else None
        if problem:
            raise Unfit(problem)
        crash_point("before-keep")
        if os.path.lexists(path):  # a symlink that leads nowhere is kept too, as the link
            kept.append(quarantine.keep(path, action.reasons, action.kind.value))
        crash_point("before-replace")

    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with atomic_binary(path, prefix=temp_prefix_for(path), before_replace=keep_old) as out:
            out.write(data)
            crash_point("mid-write")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(path, exc) from None
        raise
    crash_point("after-replace")
    return kept[0] if kept else None


def failed(path: str, action: Action, exc: Exception) -> ItemResult:
    """What one file's failure means: a full disk stops the run (:func:`disk_full` raises);
    anything else fails this file only, or blocks it when it is no file to rewrite."""
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(path, exc) from None
        return ItemResult(path, action.kind, ItemState.FAILED, f"{exc.strerror or exc}")
    reraise_interrupt(exc)
    state = ItemState.BLOCKED if isinstance(exc, NotRewritable) else ItemState.FAILED
    return ItemResult(path, action.kind, state, str(exc) or type(exc).__name__)


__all__ = ["Unfit", "crash_point", "disk_full", "failed", "replace_file"]
