"""The runs of a cache root's quarantine, as ``quarantine list`` prints them and restore and purge
take them: one listing of ``<root>/.cachedoctor/quarantine/`` (a folder walk, or one paginated
LIST of a prefix), then each run's records read once.

The run folder's files are the truth: a file without a record (a run killed before its records
were written) still lists and restores, to the place its path in the run says; a record without
a file (a copy that never landed) is ignored, and so is a copy marked ``abandoned`` (it replaced
nothing). A record whose original is outside the root says the cache was moved or copied since
(:attr:`QuarantineRun.moved`): the file restores into the root it is in now.

Light on purpose: ``quarantine list`` imports no scan, layout or reader.
"""

from __future__ import annotations

from cachedoctor.repair.quarantine import (
    RECORDS,
    QuarantinedFile,
    QuarantineRun,
    quarantine_url,
    relative,
    root_url,
)
from cachedoctor.repair.quarantine_records import read_records
from cachedoctor.stores.interface import (
    Location,
    ObjectInfo,
    Store,
    StoreError,
    TransientError,
)


def list_runs(root: str, store: Store | None = None) -> list[QuarantineRun]:
    """Every quarantine run of the cache root ``root`` (a folder, or a prefix of ``store``), by run id."""
    from cachedoctor.stores.connect import store_for

    root = root_url(root)
    store = store if store is not None else store_for(root)
    base = quarantine_url(root)
    by_run: dict[str, dict[str, ObjectInfo]] = {}
    for info in store.list_entries(Location.parse(base)):
        run_id, _, rel = info.url[len(base) + 1 :].partition("/")
        if rel:
            by_run.setdefault(run_id, {})[rel] = info
    runs = []
    for run_id in sorted(by_run):
        objects = by_run[run_id]
        records_info = objects.pop(RECORDS, None)
        try:  # (read before anything is changed: still failing, one line)
            records = read_records(store, "", records_info) if records_info is not None else {}
        except TransientError as exc:
            from cachedoctor.repair.model import still_failing  # (model imports the layouts: not on the light path)

            raise still_failing(f"{base}/{run_id}", exc) from None
        files, moved = [], False
        for rel, info in sorted(objects.items()):
            record = records.get(rel, {})
            if record.get("abandoned"):  # replaced nothing: not listed, not restored; purged
                continue
            original = record.get("original")
            if not isinstance(original, str) or not _inside(root, original):  # a cache moved since: restore into it
                moved = moved or isinstance(original, str)
                original = f"{root.rstrip('/')}/{original_rel(rel)}"
            reasons = tuple(record.get("reasons") or ())
            files.append(QuarantinedFile(rel, info.size, original, reasons, str(record.get("action") or "unknown")))
        runs.append(QuarantineRun(run_id, f"{base}/{run_id}", tuple(files), moved, objects, records))
    return runs


def _inside(root: str, url: str) -> bool:
    try:
        relative(root, url)
    except (ValueError, StoreError):  # not a URL or absolute path at all
        return False
    return True


def original_rel(rel: str) -> str:
    """``a/b.pt.1`` (a second copy of one path in one run) restores to ``a/b.pt``."""
    stem, _, n = rel.rpartition(".")
    return stem if n.isdigit() and stem else rel


def find_run(root: str, run_id: str, store: Store | None = None) -> QuarantineRun | None:
    return next((r for r in list_runs(root, store) if r.run_id == run_id), None)


__all__ = ["find_run", "list_runs", "original_rel", "read_records"]
