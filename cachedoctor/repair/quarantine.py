"""The quarantine: where everything repair replaces or moves goes, so nothing is ever lost.

``<cache root>/.cachedoctor/quarantine/<run id>/<path relative to the root>``, plus
``.records.jsonl`` in the run folder saying, per file, where it came from and why. The root is
a folder or an object-store prefix (``s3://bucket/prefix``): this one class writes both, over
:class:`~cachedoctor.stores.interface.Store`, and asks the store what it can do, never which it is:

* ``capabilities.links`` (a file system): a file is kept by hard link while the original stays
  in place until the replacement is renamed over it, and moved out by rename: no bytes copied,
  however big, and both stay on the cache's own file system (``atomic.transfer`` falls back to
  a fsynced copy across file systems). A name is looked up before it is linked: a resumed run
  linked it already, or a second version of one path goes beside it (``name.1``).
* without it (an object store): a server-side copy conditional on the version the scan saw
  (``CopySourceIfMatch``), verified by the HEAD of the copy: same size, and the same ETag
  unless the original was a multipart upload (whose ETag a one-request copy does not keep; the
  condition on the source vouches for it then). Nothing is replaced or deleted before that.
* ``capabilities.appends`` (a file system): each record is appended, and fsynced, before the
  file it explains is moved or linked in, so a run killed at any instant leaves every
  quarantined file's reason on record (a record whose file never arrived is ignored). Without
  it, records are kept in memory and the records object is written whole by
  :meth:`Quarantine.write_records` (each batch, the end of a run); ``recover`` writes what a
  kill lost from the journal.

The run folder's files are the truth (what restores), the records the explanation. Records of
a store with server versions also say what repair left at the original's place
(``replaced_by``: the new object's ETag, ``null`` when it was moved out): that is how a restore
tells an object that changed since the repair from the one repair wrote. Listing and restoring
are ``quarantine_runs.py`` and ``quarantine_restore.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field

from cachedoctor.lifetime import kill_due, kill_self
from cachedoctor.repair.quarantine_records import RECORDS, read_records
from cachedoctor.statedir import QUARANTINE_DIR, STATE_DIR
from cachedoctor.stores.interface import Location, ObjectGone, ObjectInfo, Store, is_remote


@dataclass(frozen=True, slots=True)
class QuarantinedFile:
    relpath: str
    size: int
    original: str
    reasons: tuple[str, ...]
    action: str


@dataclass(frozen=True, slots=True)
class QuarantineRun:
    run_id: str
    folder: str
    files: tuple[QuarantinedFile, ...]
    #: Its records name originals outside its cache root: the cache was moved, or copied (then
    #: another root may hold the same run, and only the user can say which one to restore).
    moved: bool = False
    #: The run folder's objects by path in it (abandoned copies too: a purge removes them) and
    #: its records by the same paths, as the listing found them.
    objects: dict[str, ObjectInfo] = field(default_factory=dict, compare=False)
    records: dict[str, dict] = field(default_factory=dict, compare=False)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class CopyUnverified(Exception):
    """The quarantine copy is not the object it was copied from: nothing else is done."""


def root_url(root: str) -> str:
    """A cache root as its store names it: a URL as given, a local path made absolute."""
    return root if is_remote(root) else os.path.abspath(root)


def quarantine_url(root: str | Location) -> str:
    """``<root>/.cachedoctor/quarantine``: where every run's folder of a cache root lives."""
    location = root if isinstance(root, Location) else Location.parse(root_url(root))
    return location.child("/".join(p for p in (location.key, STATE_DIR, QUARANTINE_DIR) if p)).url


def relative(root: str, url: str) -> str:
    """``url``'s key relative to the cache root (``ValueError`` outside it)."""
    base, key = Location.parse(root), Location.parse(url)
    prefix = f"{base.key}/" if base.key else ""
    if base.bucket != key.bucket or not key.key.startswith(prefix) or key.key == prefix:
        raise ValueError(f"{url} is outside the cache root {root}")
    return key.key[len(prefix) :]


def multipart(etag: str) -> bool:
    """An ETag of a multipart upload (``<md5>-<parts>``): a copy gets another one."""
    return "-" in etag


def versions_kept(store: Store) -> bool:
    """Whether a kept copy has its original's version: an ETag that is a digest of the bytes
    (``Capabilities.content_etags``), or a hard link, which shares its original's stat
    signature (``Capabilities.links``). Elsewhere a copy has a version of its own."""
    return store.capabilities.content_etags or store.capabilities.links


def same_version(copy: ObjectInfo, original: ObjectInfo, exact: bool = True) -> bool:
    """Whether ``copy`` holds ``original``'s bytes, as far as a HEAD can tell (size and ETag; size
    alone for a multipart original, whose ETag a one-request copy does not keep, and where a
    copy has a version of its own: ``exact`` is :func:`versions_kept` of the store)."""
    return copy.size == original.size and (not exact or multipart(original.etag) or copy.etag == original.etag)


class Quarantine:
    """The quarantine of one run in one cache root (a folder, or a prefix of ``store``)."""

    def __init__(self, root: str, run_id: str, store: Store | None = None, *, resumed: bool = False) -> None:
        from cachedoctor.stores.connect import store_for

        self.root = root_url(root)
        self.run_id = run_id
        self.store = store if store is not None else store_for(self.root)
        self.folder = f"{quarantine_url(self.root)}/{run_id}"
        self.resumed = resumed  # a copy may be there already (then one HEAD saves the copy)
        self._links = self.store.capabilities.links
        self._appends = self.store.capabilities.appends
        self._records: dict[str, dict] | None = None if resumed and not self._appends else {}
        self._dirty = False  # records noted, not yet written (no appends) or fsynced (appends)
        self._lock = threading.Lock()  # items are kept from several threads

    def destination(self, url: str) -> str:
        return f"{self.folder}/{relative(self.root, root_url(url))}"

    def keep(self, what: str | ObjectInfo, reasons: tuple[str, ...], action: str, *, sync: bool = True) -> str:
        """Preserve the current version of ``what`` (a path or URL, or the object as listed), which
        is about to be replaced or deleted; where it went. Idempotent for a resumed run.
        ``sync=False`` (appending stores): the caller makes the batch durable with
        :meth:`write_records` and one folder fsync before it replaces anything (``batch.py``).
        Raises ``ObjectChanged``/``ObjectGone`` (not that version any more) and
        :class:`CopyUnverified`; a path that is not there, ``FileNotFoundError``."""
        info = self._info(what)
        dest = self.destination(info.url)
        if self._links or self.resumed:
            there = self.store.head_entry(dest)
            if there is not None and same_version(there, info, versions_kept(self.store)):
                if not self._appends:
                    self.note(dest, info, reasons, action)
                return dest  # the interrupted run kept it already
            if there is not None and self._links:
                dest = self._free_name(dest)
        if self._appends:  # first: a kill after the link keeps the reason
            self.note(dest, info, reasons, action, sync=sync)
        if self._links:
            self.store.link(info.url, dest, sync=sync)
        else:
            self._copy(info, dest)
        if not self._appends:  # in memory: only a copy that landed is explained
            self.note(dest, info, reasons, action)
        _landed()
        return dest

    def move(self, what: str | ObjectInfo, reasons: tuple[str, ...], action: str) -> str:
        """Move ``what`` out of the cache into the quarantine: a rename, or a verified copy and a
        delete conditional on the version copied."""
        info = self._info(what)
        if not self._links:
            dest = self.keep(info, reasons, action)
            self.store.delete_if_match(info.url, info.etag)
            return dest
        dest = self.destination(info.url)
        if self.store.head_entry(dest) is not None:
            dest = self._free_name(dest)
        self.note(dest, info, reasons, action)  # first: a kill after the move keeps the reason
        self.store.rename(info.url, dest)
        _landed()
        return dest

    def _info(self, what: str | ObjectInfo) -> ObjectInfo:
        if isinstance(what, ObjectInfo):
            return what
        info = self.store.head_entry(root_url(what))
        if info is None:
            raise FileNotFoundError(2, "No such file or directory", what)
        return info

    def _copy(self, info: ObjectInfo, dest: str) -> None:
        copied = self.store.copy(info, dest)
        if not same_version(copied, info, versions_kept(self.store)):
            with contextlib.suppress(Exception):  # a wrong copy is no copy: never restored
                self.store.delete(dest)
            raise CopyUnverified(
                f"the quarantine copy {dest} has size {copied.size} and ETag {copied.etag}, "
                f"not {info.size} and {info.etag}; the object was left as it is"
            )

    def _free_name(self, dest: str) -> str:
        n = 1
        while self.store.head_entry(f"{dest}.{n}") is not None:
            n += 1
        return f"{dest}.{n}"

    def note(
        self,
        dest: str,
        info: ObjectInfo,
        reasons: tuple[str, ...],
        action: str,
        replaced_by: str | None = None,
        *,
        sync: bool = True,
    ) -> None:
        """Record where ``dest`` came from and why: appended at once (fsynced, or with
        ``sync=False`` by :meth:`write_records`), or in memory until :meth:`write_records`."""
        rel = dest[len(self.folder) + 1 :]
        record: dict = {"path": rel, "original": info.url, "reasons": list(reasons), "action": action}
        record.update(size=info.size, time=time.time())
        if self.store.capabilities.server_versions:  # what a restore compares: see the module doc
            record.update(etag=info.etag, last_modified=info.mtime_ns // 1_000_000_000, replaced_by=replaced_by)
        if self._appends:
            self.store.append(
                f"{self.folder}/{RECORDS}", (json.dumps(record, sort_keys=True) + "\n").encode(), sync=sync
            )
            self._dirty = self._dirty or not sync
            return
        with self._lock:
            self._load()[rel] = record
            self._dirty = True

    def replaced(self, dest: str, etag: str | None) -> None:
        """What now stands at ``dest``'s original place: the new object's ETag (``None``: nothing)."""
        with self._lock:
            record = self._load().get(dest[len(self.folder) + 1 :])
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
            records = self._load()
            if gone:
                self._dirty = records.pop(rel, None) is not None or self._dirty
            elif rel in records:
                records[rel]["abandoned"] = True
                self._dirty = True

    def write_records(self) -> None:
        """Make the records noted since the last time durable: one fsync of the appended records
        (a batch of ``keep(sync=False)``), or one PUT of the whole records object."""
        with self._lock:
            if not self._dirty:
                return
            url = f"{self.folder}/{RECORDS}"
            if self._appends:
                self.store.sync(url)
            else:
                lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self._load().values())
                self.store.put(url, lines.encode())
            self._dirty = False

    def clean_temps(self) -> int:
        """Remove the temp files a killed copy left in this run's folder (call only when no
        process is writing to this run: the one resuming it). How many there were."""
        from cachedoctor.atomic import is_own_temp

        n = 0
        for dirpath, _dirs, names in os.walk(self.folder) if self._links else ():
            for name in names:
                if is_own_temp(name):
                    os.unlink(os.path.join(dirpath, name))
                    n += 1
        return n

    def _load(self) -> dict[str, dict]:
        if self._records is None:  # a resumed run: its records so far, once
            self._records = read_records(self.store, f"{self.folder}/{RECORDS}")
        return self._records


def _landed() -> None:
    """Crash tests only: ``CACHEDOCTOR_TEST_KILL_AT_QUARANTINE=N`` SIGKILLs the process right after
    its N-th file lands in a quarantine (a point of its own: the ``KILL_AT`` sweeps count theirs)."""
    if kill_due("CACHEDOCTOR_TEST_KILL_AT_QUARANTINE"):
        kill_self()


__all__ = [
    "RECORDS",
    "CopyUnverified",
    "Quarantine",
    "QuarantineRun",
    "QuarantinedFile",
    "multipart",
    "quarantine_url",
    "relative",
    "root_url",
    "same_version",
    "versions_kept",
]
