"""``quarantine restore`` and ``purge`` of a remote cache's run (``remote_quarantine.py``).

A restore copies each quarantined object back to where it was, server side, and verifies the
copy as repair verifies its own; what stands there now is first kept in a new quarantine run,
as on disk, so a restore loses nothing either. Unlike a file on disk, an object that changed
since the repair (the record's ``replaced_by`` is not its ETag now: a trainer wrote it again,
or re-cached one repair had moved out) is not overwritten unless ``force``: every object is
checked before the first is copied, and the first such object is named in one line. The lock
of the prefix is held throughout; the run's objects are deleted once all are back.
"""

from __future__ import annotations

from cachedoctor.repair.model import RepairError
from cachedoctor.repair.quarantine import RECORDS
from cachedoctor.repair.remote_lock import PrefixLock
from cachedoctor.repair.remote_quarantine import CopyUnverified, RemoteQuarantine, RemoteRun, delete_all, same_version
from cachedoctor.stores.interface import Location, ObjectInfo, Store


class RestoreRefused(RepairError):
    """An object changed since the repair: restoring would overwrite someone else's write."""


def _changed(record: dict, now: ObjectInfo | None) -> bool:
    """Whether what stands at the original's place is not what repair left there."""
    if "replaced_by" not in record:
        return False  # no record (a kill before it was written): nothing to compare with
    left = record["replaced_by"]
    return (now.etag if now is not None else None) != left


def restore_remote(
    store: Store, location: Location, found: RemoteRun, new_run_id: str, force: bool = False
) -> tuple[list[tuple[str, str]], bool]:
    """Put every object of ``found`` back. Returns ``(quarantined URL, restored URL)`` pairs and
    whether anything that stood in the way was kept in quarantine run ``new_run_id``."""
    run = found.run
    with PrefixLock(store, location, new_run_id, "quarantine restore"):
        now = {item.relpath: store.head(item.original) for item in run.files}
        changed = [item for item in run.files if _changed(found.records.get(item.relpath, {}), now[item.relpath])]
        if changed and not force:
            first = changed[0]
            raise RestoreRefused(
                first.original,
                f"changed since repair run {run.run_id} replaced it ({len(changed)} object(s) like it); "
                "nothing was restored. Pass --force to restore anyway (what is there now is kept in a new "
                "quarantine run)",
            )
        aside = RemoteQuarantine(store, location, new_run_id)
        done: list[tuple[str, str]] = []
        try:
            for item in run.files:
                source = found.objects[item.relpath]
                current = now[item.relpath]
                if current is not None:
                    aside.keep(current, ("restore",), f"replaced by restore of {run.run_id}")
                copied = store.copy(source, item.original)
                if not same_version(copied, source, store.capabilities.content_etags):
                    raise CopyUnverified(f"{item.original}: the restored copy is not the quarantined object")
                done.append((f"{run.folder}/{item.relpath}", item.original))
        except CopyUnverified as exc:
            raise RepairError(item.original, f"{exc}; run the same restore again") from None
        finally:
            aside.write_records()
        delete_all(store, [src for src, _ in done] + [f"{run.folder}/{RECORDS}"])
    return done, bool(any(v is not None for v in now.values()))


def purge_remote(store: Store, location: Location, found: RemoteRun) -> int:
    """Delete a run's objects for good; the bytes freed."""
    size = found.run.size
    with PrefixLock(store, location, f"purge-{found.run.run_id}", "quarantine purge"):
        delete_all(store, [f"{found.run.folder}/{rel}" for rel in found.objects] + [f"{found.run.folder}/{RECORDS}"])
    return size


__all__ = ["RestoreRefused", "purge_remote", "restore_remote"]
