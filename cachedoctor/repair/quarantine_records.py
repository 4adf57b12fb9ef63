"""A quarantine run's records (``.records.jsonl``: per kept file, where it came from and why),
read back from any store: written by ``quarantine.py``, read by it when a run resumes and by
``quarantine_runs.py`` when runs are listed. Records are advisory (the folder tree is what
restores), so a line a crash cut short is skipped and an oversized file is not read."""

from __future__ import annotations

import json

from cachedoctor.stores.interface import ObjectChanged, ObjectGone, ObjectInfo, Store

RECORDS = ".records.jsonl"
#: Records bigger than this are not read (they are advisory).
RECORDS_LIMIT = 64 << 20


def read_records(store: Store, url: str, info: ObjectInfo | None = None) -> dict[str, dict]:
    """A run's records by path in the run folder (``{}`` when there are none). A line a crash
    cut short is skipped; the file it explains still counts."""
    info = info or store.head(url)
    if info is None:
        return {}
    try:
        try:
            data = store.read_whole(info, RECORDS_LIMIT)
        except ObjectChanged:  # appended to since it was listed: read what is there now, once
            now = store.head(info.url)
            data = store.read_whole(now, RECORDS_LIMIT) if now is not None else b""
    except (ObjectGone, ObjectChanged):
        return {}
    text = data.decode("utf-8", "replace")
    out: dict[str, dict] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("path"), str):
            out[record["path"]] = record
    return out


__all__ = ["RECORDS", "RECORDS_LIMIT", "read_records"]
