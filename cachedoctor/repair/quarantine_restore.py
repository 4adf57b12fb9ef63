"""``quarantine restore`` and ``purge`` of one run of one cache root, a folder or a prefix.

A restore puts each quarantined file back where it was (a rename where the store has
``capabilities.links``, else a server-side copy verified as repair verifies its own); what
stands there now is first kept in a new quarantine run, so a restore loses nothing either.
Where the records say what repair left at the original's place (``replaced_by``, written by
stores with server versions), a file that changed since the repair (a trainer wrote it again,
or re-cached one repair had moved out) is not overwritten unless ``force``: every file is
checked before the first is put back, and the first such file is named in one line.

Who else may write is excluded as the store's writers agree to be (``Capabilities``): with
server versions, by the prefix's lock object, held throughout (``prefix_lock.py``); without,
by each file's lock (``file_locks.py``), held while it is put back. The run is removed once
every file is back; a restore stopped part way leaves the rest in the run, and the same
restore again goes on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cachedoctor.errors import PathError
from cachedoctor.repair.model import RepairError, still_failing
from cachedoctor.repair.quarantine import (
    CopyUnverified,
    Quarantine,
    QuarantinedFile,
    QuarantineRun,
    root_url,
    same_version,
    versions_kept,
)
from cachedoctor.stores.interface import Location, ObjectInfo, Store, TransientError


class RestoreError(PathError):
    """A restore stopped part way (a full disk, an I/O error); the rest is still in the run."""


class RestoreRefused(RepairError):
    """A file changed since the repair: restoring would overwrite someone else's write."""


def _changed(record: dict, now: ObjectInfo | None) -> bool:
    """Whether what stands at the original's place is not what repair left there."""
    if "replaced_by" not in record:
        return False  # no record (a kill before it was written), or a store without versions
    left = record["replaced_by"]
    return (now.etag if now is not None else None) != left


@contextlib.contextmanager
def _prefix_held(store: Store, root: str, run_id: str, command: str) -> Iterator[None]:
    """The prefix's lock object, where every writer of a store with server versions takes it."""
    if not store.capabilities.server_versions:
        yield
        return
    from cachedoctor.repair.prefix_lock import PrefixLock

    with PrefixLock(store, Location.parse(root), run_id, command):
        yield


def _file_held(store: Store, url: str) -> contextlib.AbstractContextManager[object]:
    """The per-file lock of cooperating writers, where a store without server versions relies
    on it (``Capabilities.server_versions``)."""
    if store.capabilities.server_versions:
        return contextlib.nullcontext()
    from cachedoctor.file_locks import file_lock

    return file_lock(url)


def restore(
    root: str, run: QuarantineRun, new_run_id: str, force: bool = False, store: Store | None = None
) -> tuple[list[tuple[str, str]], bool]:
    """Put every file of ``run`` back. Returns ``(quarantined file, restored path)`` pairs and
    whether anything that stood in the way was kept in quarantine run ``new_run_id``. A failure
    stops it with :class:`RestoreError` (or :class:`RepairError`): what is restored is in the
    cache, the rest still in the run."""
    from cachedoctor.stores.connect import store_for

    root = root_url(root)
    store = store if store is not None else store_for(root)
    links = store.capabilities.links  # a lookup costs nothing: looked at again under the file's lock
    with _prefix_held(store, root, new_run_id, "quarantine restore"):
        try:  # (nothing is changed before these: still failing, one line)
            now = {item.relpath: store.head_entry(item.original) for item in run.files}
        except TransientError as exc:
            raise still_failing(root, exc) from None
        changed = [item for item in run.files if _changed(run.records.get(item.relpath, {}), now[item.relpath])]
        if changed and not force:
            raise RestoreRefused(
                changed[0].original,
                f"changed since repair run {run.run_id} replaced it ({len(changed)} object(s) like it); "
                "nothing was restored. Pass --force to restore anyway (what is there now is kept in a new "
                "quarantine run)",
            )
        aside = Quarantine(root, new_run_id, store)
        done: list[tuple[str, str]] = []
        replaced = False
        try:
            for item in run.files:
                with _file_held(store, item.original):
                    current = store.head_entry(item.original) if links else now[item.relpath]
                    if current is not None:
                        aside.keep(current, ("restore",), f"replaced by restore of {run.run_id}")
                        replaced = True
                    _put_back(store, run, item)
                done.append((f"{run.folder}/{item.relpath}", item.original))
        except OSError as exc:
            raise _stopped(run, item, len(done), exc) from None
        except CopyUnverified as exc:
            raise RepairError(item.original, f"{exc}; run the same restore again") from None
        finally:
            aside.write_records()
        store.delete_under(Location.parse(run.folder))
    return done, replaced


def _put_back(store: Store, run: QuarantineRun, item: QuarantinedFile) -> None:
    source = f"{run.folder}/{item.relpath}"
    if store.capabilities.links:
        store.rename(source, item.original)
        return
    info = run.objects[item.relpath]
    copied = store.copy(info, item.original)
    if not same_version(copied, info, versions_kept(store)):
        raise CopyUnverified(f"{item.original}: the restored copy is not the quarantined object")


def _stopped(run: QuarantineRun, item: QuarantinedFile, done: int, exc: OSError) -> RestoreError:
    from cachedoctor.faults import could_not_write

    left = len(run.files) - done
    then = (
        f"run the same `cachedoctor quarantine restore {run.run_id}` again: {done} file(s) are back, "
        f"{left} still in the quarantine"
    )
    return RestoreError(item.original, could_not_write(exc, item.original, "the restored file", then))


def purge(root: str, run: QuarantineRun, store: Store | None = None) -> int:
    """Delete a quarantine run for good (the one place cachedoctor deletes data, on request);
    the bytes freed."""
    from cachedoctor.stores.connect import store_for

    root = root_url(root)
    store = store if store is not None else store_for(root)
    size = run.size
    with _prefix_held(store, root, f"purge-{run.run_id}", "quarantine purge"):
        store.delete_under(Location.parse(run.folder))
    return size


__all__ = ["RestoreError", "RestoreRefused", "purge", "restore"]
