"""Carry out one action on one path, under that path's lock, and read the result back.

A rewrite takes the crash-safe steps of ``swap.py`` (temp file, judged, old file to the
quarantine, rename); a quarantine moves the file; a cleanup deletes an abandoned temp file of
our own; a diffusion-pipe index cut (``drop-items``) is ``shards.py``'s. The next run re-plans
from a fresh scan and the journal, so whatever a crash left broken is done again.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cachedoctor.atomic import fsync_dir, temp_target
from cachedoctor.file_locks import file_lock
from cachedoctor.repair.model import Action, ActionKind, ItemResult, ItemState, RepairError, Stat
from cachedoctor.repair.quarantine import Quarantine

# ``X as X``: moved to swap.py (the steps shards.py takes too), still importable from here
from cachedoctor.repair.swap import Unfit as Unfit
from cachedoctor.repair.swap import crash_point as crash_point
from cachedoctor.repair.swap import disk_full as disk_full
from cachedoctor.repair.swap import failed as failed
from cachedoctor.repair.swap import replace_file as replace_file
from cachedoctor.repair.verify import unfit_line


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
        from cachedoctor.repair.shards import drop_items  # here: only diffusion-pipe folders need it (sqlite3)

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
