"""The quarantine of a remote cache: ``<prefix>/.cachedoctor/quarantine/<run id>/<key relative
to the prefix>``, with ``.records.jsonl`` in the run folder, as ``quarantine.py`` keeps it on
disk, so that ``quarantine list/restore/purge`` read both the same way.

An object is kept by a server-side copy conditional on the ETag the scan saw
(``CopySourceIfMatch``: the copy is of exactly that version, or :class:`ObjectChanged`), then
verified by the HEAD the store makes of the copy: same size, and the same ETag unless the
original was a multipart upload (whose ETag a one-request copy does not keep; the condition on
the source is what vouches for it then). Nothing is replaced or deleted before that.

An object store cannot append, so the records are kept in memory and the whole records object
is PUT again at each :meth:`RemoteQuarantine.write_records` (a batch, the end of a run). As on
disk, the run folder's objects are the truth and the records the explanation: a run killed
before its records were written still lists and restores (``recover`` writes the missing
records from the journal). Each record also says what repair left at the original's place
(``replaced_by``: the new object's ETag, ``null`` when it was moved out), which is how a
restore tells an object that changed since the repair from the one it wrote.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from cachedoctor.repair.quarantine import RECORDS, QuarantinedFile, QuarantineRun, original_rel
from cachedoctor.repair.remote_lock import own_key
from cachedoctor.stores.interface import Location, ObjectGone, ObjectInfo, Store

#: Records bigger than this are not read (they are advisory).
_RECORDS_LIMIT = 64 << 20


class CopyUnverified(Exception):
    """The quarantine copy is not the object it was copied from: nothing else is done."""


def quarantine_url(location: Location) -> str:
    return own_key(location, "quarantine")


def relative(location: Location, url: str) -> str:
    """``url``'s key relative to the cache prefix (``ValueError`` outside it)."""
    key = Location.parse(url).key
    base = f"{location.key}/" if location.key else ""
    if not key.startswith(base) or key == base:
        raise ValueError(f"{url} is outside the cache prefix {location.url}")
    return key[len(base) :]


def multipart(etag: str) -> bool:
    """An ETag of a multipart upload (``<md5>-<parts>``): a copy gets another one."""
    return "-" in etag


class RemoteQuarantine:
    """The quarantine of one run in one remote cache prefix."""

    def __init__(self, store: Store, location: Location, run_id: str, resumed: bool = False) -> None:
        self.store = store
        self.location = location
        self.run_id = run_id
        self.folder = f"{quarantine_url(location)}/{run_id}"
        self.resumed = resumed  # a copy may already be there (then one HEAD saves the copy)
        self._records: dict[str, dict] | None = None if resumed else {}
        self._dirty = False
        self._lock = threading.Lock()  # items are kept from several threads

    def destination(self, url: str) -> str:
        return f"{self.folder}/{relative(self.location, url)}"

    def keep(self, info: ObjectInfo, reasons: tuple[str, ...], action: str) -> str:
        """Copy ``info``'s version into the quarantine and verify the copy; where it went.
        Raises :class:`ObjectChanged` (the object is no longer that version), :class:`ObjectGone`
        and :class:`CopyUnverified`."""
        dest = self.destination(info.url)
        if self.resumed:
            there = self.store.head(dest)
            if there is not None and same_version(there, info, self.store.capabilities.content_etags):
                self.note(dest, info, reasons, action)
                return dest  # the interrupted run copied it already
        copied = self.store.copy(info, dest)
        if not same_version(copied, info, self.store.capabilities.content_etags):
            with contextlib.suppress(Exception):  # a wrong copy is no copy: never restored
                self.store.delete(dest)
            raise CopyUnverified(
                f"the quarantine copy {dest} has size {copied.size} and ETag {copied.etag}, "
                f"not {info.size} and {info.etag}; the object was left as it is"
            )
        self.note(dest, info, reasons, action)
        return dest

    def note(
        self, dest: str, info: ObjectInfo, reasons: tuple[str, ...], action: str, replaced_by: str | None = None
    ) -> None:
        """Record (in memory, until :meth:`write_records`) where ``dest`` came from and why."""
        rel = dest[len(self.folder) + 1 :]
        with self._lock:
            self._note(rel, info, reasons, action, replaced_by)

    def _note(self, rel: str, info: ObjectInfo, reasons: tuple[str, ...], action: str, replaced_by: str | None) -> None:
        self._load()
        assert self._records is not None
        self._records[rel] = {
            "path": rel,
            "original": info.url,
            "etag": info.etag,
            "size": info.size,
            "last_modified": info.mtime_ns // 1_000_000_000,
            "reasons": list(reasons),
            "action": action,
            "replaced_by": replaced_by,
            "time": time.time(),
        }
        self._dirty = True

    def replaced(self, dest: str, etag: str | None) -> None:
        """What now stands at ``dest``'s original place: the new object's ETag (``None``: nothing)."""
        with self._lock:
            self._load()
            assert self._records is not None
            record = self._records.get(dest[len(self.folder) + 1 :])
            if record is not None:
                record["replaced_by"] = etag
                self._dirty = True

    def abandon(self, dest: str) -> None:
        """The copy at ``dest`` replaced nothing (the PUT or DELETE after it was refused): it is
        deleted and its record dropped, so neither ``quarantine list`` nor restore sees it. A copy
        that cannot be deleted keeps its record marked ``abandoned`` (both pass it over)."""
        rel = dest[len(self.folder) + 1 :]
        try:
            self.store.delete(dest)
            gone = True
        except ObjectGone:
            gone = True
        except Exception:  # best effort (a transient fault): the record then says what the copy is
            gone = False
        with self._lock:
            self._load()
            assert self._records is not None
            if gone:
                self._dirty = self._records.pop(rel, None) is not None or self._dirty
            elif rel in self._records:
                self._records[rel]["abandoned"] = True
                self._dirty = True

    def write_records(self) -> None:
        """PUT the records object again if anything was noted since the last time."""
        with self._lock:
            if not self._dirty or self._records is None:
                return
            lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self._records.values())
            self.store.put(f"{self.folder}/{RECORDS}", lines.encode())
            self._dirty = False

    def _load(self) -> None:
        if self._records is None:  # a resumed run: its records so far, once
            self._records = read_records(self.store, f"{self.folder}/{RECORDS}")


def same_version(copy: ObjectInfo, original: ObjectInfo, content_etags: bool = True) -> bool:
    """Whether ``copy`` holds ``original``'s bytes, as far as a HEAD can tell (size and ETag; size
    alone for a multipart original, whose ETag a one-request copy does not keep, and on a store
    whose ETags are versions, not digests: ``Capabilities.content_etags``)."""
    return copy.size == original.size and (not content_etags or multipart(original.etag) or copy.etag == original.etag)


def read_records(store: Store, url: str, info: ObjectInfo | None = None) -> dict[str, dict]:
    """A run's records by path in the run folder (``{}`` when there are none)."""
    info = info or store.head(url)
    if info is None:
        return {}
    try:
        text = store.read_whole(info, _RECORDS_LIMIT).decode("utf-8", "replace")
    except ObjectGone:
        return {}
    out: dict[str, dict] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("path"), str):
            out[record["path"]] = record
    return out


@dataclass(frozen=True, slots=True)
class RemoteRun:
    """A quarantine run of a remote cache: the listed run (as ``quarantine list`` prints it), its
    objects' facts and its records."""

    run: QuarantineRun
    objects: dict[str, ObjectInfo]  # by path in the run folder
    records: dict[str, dict]


def list_remote_runs(store: Store, location: Location) -> list[RemoteRun]:
    """Every quarantine run under ``location``: one LIST, and one GET per run's records."""
    base = Location.parse(quarantine_url(location))
    by_run: dict[str, dict[str, ObjectInfo]] = {}
    for info in store.list(base):
        rest = info.key[len(base.key) + 1 :]
        run_id, _, rel = rest.partition("/")
        if rel:
            by_run.setdefault(run_id, {})[rel] = info
    runs = []
    for run_id in sorted(by_run):
        objects = by_run[run_id]
        records_info = objects.pop(RECORDS, None)
        records = read_records(store, "", records_info) if records_info is not None else {}
        files = tuple(  # (an abandoned copy replaced nothing: not listed, not restored; purged)
            _file(location, rel, info, records.get(rel, {}))
            for rel, info in sorted(objects.items())
            if not records.get(rel, {}).get("abandoned")
        )
        folder = f"{quarantine_url(location)}/{run_id}"
        runs.append(RemoteRun(QuarantineRun(run_id, folder, files), objects, records))
    return runs


def _file(location: Location, rel: str, info: ObjectInfo, record: dict) -> QuarantinedFile:
    original = record.get("original")
    if not isinstance(original, str) or not _inside(location, original):
        original = location.child("/".join(p for p in (location.key, original_rel(rel)) if p)).url
    return QuarantinedFile(
        rel, info.size, original, tuple(record.get("reasons") or ()), str(record.get("action") or "unknown")
    )


def _inside(location: Location, url: str) -> bool:
    try:
        relative(location, url)
    except ValueError:
        return False
    return Location.parse(url).bucket == location.bucket


def delete_all(store: Store, urls: Iterable[str]) -> int:
    """Delete each object (a purge, or a restored run's leftovers); how many were there."""
    n = 0
    for url in urls:
        try:
            store.delete(url)
            n += 1
        except ObjectGone:
            continue
    return n


__all__ = [
    "CopyUnverified",
    "RemoteQuarantine",
    "RemoteRun",
    "delete_all",
    "list_remote_runs",
    "multipart",
    "quarantine_url",
    "read_records",
    "relative",
    "same_version",
]
