"""Carry out one action on one path, under that path's lock, and read the result back.

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
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from cachedoctor.atomic import atomic_binary, fsync_dir, temp_prefix_for, temp_target
from cachedoctor.lifetime import kill_due, kill_self, reraise_interrupt
from cachedoctor.repair.locks import file_lock
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, NotRewritable, RepairError, Stat
from cachedoctor.repair.quarantine import Quarantine
from cachedoctor.repair.verify import unfit_line


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


def run_action(
    action: Action,
    quarantine: Quarantine,
    make_bytes: Callable[[Action], bytes] | None = None,
    verify: Callable[[Action, str], str | None] | None = None,
) -> ItemResult:
    """Do ``action`` if the file is still as planned. ``make_bytes`` produces the new content
    (lossless and recompute actions); ``verify(action, temp_path)`` returns what is wrong with the
    new content (then it is not put in place), or ``None``.
    Raises :class:`RepairError` on a full disk (the run must stop), never for one bad file."""
    path = action.path
    if action.kind is ActionKind.CLEANUP:
        return _cleanup(action)
    if action.kind is ActionKind.DROP_ITEMS:  # several files (an index and its shards): its own steps
        from cachedoctor.repair.shards import drop_items

        return drop_items(action, quarantine)
    with file_lock(path):
        now = Stat.of(path)
        if now is None and action.kind is not ActionKind.RECOMPUTE:
            return ItemResult(path, action.kind, ItemState.SKIPPED, "gone since the scan (moved by another process)")
        if now != action.before:
            return ItemResult(
                path, action.kind, ItemState.SKIPPED, "changed since the scan; left for the final scan to judge"
            )
        try:
            if action.kind is ActionKind.QUARANTINE:
                crash_point("before-move")
                dest: str | None = quarantine.move(path, action.reasons, action.kind.value)
                crash_point("after-move")
                why = "moved to the quarantine"
                if action.note:  # a recompute that could not be done: the trainer re-caches the item
                    why += f" (not recomputed: {action.note}; the trainer re-caches it)"
                return ItemResult(path, action.kind, ItemState.VERIFIED, why, dest, action.bytes, 0)
            assert make_bytes is not None
            data = make_bytes(action)
            dest = replace_file(path, data, quarantine, action, verify)
        except RepairError:
            raise
        except Unfit as exc:
            return ItemResult(path, action.kind, ItemState.FAILED, unfit_line(str(exc)))
        except Exception as exc:  # one bad file must not stop the run
            return failed(path, action, exc)
        return ItemResult(path, action.kind, ItemState.VERIFIED, "written and checked", dest, action.bytes, len(data))


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


def _cleanup(action: Action) -> ItemResult:
    """Delete a temp file of cachedoctor's own. Its writer held the target's lock for the temp
    file's whole life, so a temp file still here while we hold that lock is abandoned."""
    path = action.path
    target = temp_target(path)
    if target is None:
        return ItemResult(path, action.kind, ItemState.FAILED, "not a cachedoctor temp file")
    with file_lock(target):
        try:
            os.unlink(path)
        except FileNotFoundError:
            return ItemResult(path, action.kind, ItemState.SKIPPED, "already gone")
        fsync_dir(os.path.dirname(path))
    return ItemResult(
        path,
        action.kind,
        ItemState.VERIFIED,
        "deleted (an interrupted write of cachedoctor's own)",
        None,
        action.bytes,
        0,
    )
