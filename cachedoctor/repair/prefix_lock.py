"""Where a repair through a store's conditional requests (``store_flow.py``) keeps its own things,
and the lock that lets one such repair at a time change a prefix: one object created only if
absent (``Store.put_if_absent``), which every store implements (on a disk, ``link(2)``).

An object store has no ``flock``. The convention is one object, ``<prefix>/.cachedoctor/lock``,
created with a conditional PUT (``If-None-Match: *``, which S3, MinIO and moto honour): the
first repair to create it holds the prefix; a second one finds it there and stops with one line
naming the holder (host, pid, run, since when). It is deleted at the end of the run, on error
too; only a SIGKILL or a power cut leaves it, and then ``cachedoctor recover s3://... --apply``
clears it when the holder is provably gone (same host, process dead), as the local journal
decides whether an interrupted run's process is gone. A holder on another host cannot be
judged from here: the line says to delete the object by hand once that repair is known dead.

The journal is not in the bucket: it is local (SQLite needs a file system), under the user
cache directory, one folder per bucket and prefix (``journal_home``), beside the remote scan's
state. Two machines repairing one prefix therefore do not see each other's journals; the lock
is what keeps them apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass

from cachedoctor.repair.journal import process_alive, process_start
from cachedoctor.repair.model import RepairError, still_failing
from cachedoctor.statedir import STATE_DIR
from cachedoctor.stores.interface import Location, ObjectChanged, ObjectGone, Store, TransientError

LOCK = "lock"
#: A lock object bigger than this is no lock of ours (it is not read whole).
_LOCK_LIMIT = 64 << 10


def own_key(location: Location, *parts: str) -> str:
    """The URL of ``<prefix>/.cachedoctor/<parts...>``."""
    key = "/".join(p for p in (location.key, STATE_DIR, *parts) if p)
    return location.child(key).url


def lock_url(location: Location) -> str:
    return own_key(location, LOCK)


def journal_home(location: Location) -> str:
    """The local folder that stands for ``location`` as a cache root does (its
    ``.cachedoctor/journal.sqlite``): ``$XDG_CACHE_HOME/cachedoctor/remote/<scheme>/<bucket>/
    <hash of the prefix>.repair``, so that each prefix has its own journal."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(location.key.encode()).hexdigest()[:16]
    return os.path.join(base, "cachedoctor", "remote", location.scheme, location.bucket, f"{digest}.repair")


@dataclass(frozen=True, slots=True)
class Holder:
    """What the lock object says about the repair that holds it."""

    run_id: str
    host: str
    pid: int
    pid_start: str | None
    since: float
    command: str

    @classmethod
    def me(cls, run_id: str, command: str) -> Holder:
        pid = os.getpid()
        return cls(run_id, socket.gethostname(), pid, process_start(pid), time.time(), command)

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            raw = json.loads(data)
            return cls(
                str(raw["run_id"]),
                str(raw["host"]),
                int(raw["pid"]),
                raw.get("pid_start"),
                float(raw["since"]),
                str(raw.get("command", "")),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @property
    def gone(self) -> bool:
        """Provably dead: on this host, and its process is no longer there."""
        return self.host == socket.gethostname() and not process_alive(self.host, self.pid, self.pid_start)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return f"run {self.run_id}, pid {self.pid} on {self.host}, since {when}"


class PrefixLocked(RepairError):
    """Another repair holds the prefix (one line: who, since when, how to clear a stale lock)."""


def read_holder(store: Store, location: Location) -> tuple[Holder | None, bool]:
    """The lock's holder (``None`` when unreadable) and whether a lock object exists at all."""
    return _holder_at(store, lock_url(location))


def locked_error(location: Location, holder: Holder | None) -> PrefixLocked:
    url = lock_url(location)
    who = holder.describe() if holder else "an unreadable lock object"
    if holder is not None and holder.gone:
        then = (
            f"that process is gone: `cachedoctor recover {location.url} --apply` clears the lock and finishes its run"
        )
    elif holder is not None and holder.host == socket.gethostname():
        then = "wait for it to finish"
    else:
        then = f"wait for it to finish; if it is dead, delete the lock object by hand (aws s3 rm {url})"
    return PrefixLocked(url, f"another repair holds this prefix ({who}); {then}")


def ancestor_locks(location: Location) -> list[str]:
    """The lock URLs of every prefix that holds ``location`` (the bucket root included)."""
    parts = location.key.split("/") if location.key else []
    return [lock_url(location.child("/".join(parts[:n]))) for n in range(len(parts))]


def nested_locks(location: Location, urls: Iterable[str]) -> list[str]:
    """The lock objects among ``urls`` (a listing of ``location``) of prefixes under it."""
    own = lock_url(location)
    out = []
    for url in urls:
        parts = Location.parse(url).key.split("/")
        if parts[-2:] == [STATE_DIR, LOCK] and STATE_DIR not in parts[:-2] and url != own:
            out.append(url)
    return sorted(out)


def _holder_at(store: Store, url: str) -> tuple[Holder | None, bool]:
    """``read_holder`` of the lock object at ``url``."""
    info = store.head(url)
    if info is None:
        return None, False
    try:
        return Holder.parse(store.read_whole(info, _LOCK_LIMIT)), True
    except ObjectGone:
        return None, False
    except ObjectChanged:
        return None, True


def overlap_error(location: Location, url: str, holder: Holder | None) -> PrefixLocked:
    """Another repair holds a prefix above or under ``location``: one line naming its lock."""
    who = holder.describe() if holder else "an unreadable lock object"
    prefix = url.rsplit(f"/{STATE_DIR}/", 1)[0]
    if holder is not None and holder.gone:
        then = f"that process is gone: `cachedoctor recover {prefix} --apply` finishes its run and clears the lock"
    else:
        then = "the two would change the same objects; wait for it to finish, then run this repair again"
    return PrefixLocked(url, f"a repair of the overlapping prefix {prefix} holds this lock ({who}); {then}")


class PrefixLock:
    """``with PrefixLock(store, location, run_id, command):`` holds the prefix for the block."""

    #: How long the first of two overlapping repairs that started together waits for the later
    #: one to see it and let go (seconds).
    outwait = 3.0

    def __init__(self, store: Store, location: Location, run_id: str, command: str = "repair") -> None:
        self.store = store
        self.location = location
        self.url = lock_url(location)
        self.holder = Holder.me(run_id, command)
        self.held = False

    def acquire(self, take_stale: bool = False) -> None:
        """Create the lock object, or raise :class:`PrefixLocked`. ``take_stale``: a lock whose
        holder is provably gone is deleted first (``recover --apply``). An endpoint that keeps
        failing is one line saying to try again later (:func:`still_failing`)."""
        try:
            self._acquire(take_stale)
        except TransientError as exc:
            raise still_failing(self.url, exc, "the lock cannot be taken") from None

    def _acquire(self, take_stale: bool) -> None:
        if self.store.put_if_absent(self.url, self.holder.to_bytes()):
            self.held = True
            return
        holder, exists = read_holder(self.store, self.location)
        if holder is not None and (holder.run_id, holder.pid, holder.host) == self._mine():
            self.held = True  # our own PUT went through unanswered, and its retry found it there
            return
        if take_stale and exists and holder is not None and holder.gone:
            self.store.delete(self.url)
            if self.store.put_if_absent(self.url, self.holder.to_bytes()):
                self.held = True
                return
            holder, _ = read_holder(self.store, self.location)
        elif not exists and self.store.put_if_absent(self.url, self.holder.to_bytes()):
            self.held = True  # released between our two requests
            return
        raise locked_error(self.location, holder)

    def exclude_overlaps(self, listed_urls: Iterable[str], ours: Collection[str] = ()) -> None:
        """Once the lock is held: stop (release, :class:`PrefixLocked`) while a repair of an
        overlapping prefix holds its own: an ancestor's (one HEAD each, the bucket root's too)
        or one under this prefix (``listed_urls``: a listing made after :meth:`acquire`). Taking
        the lock first, then looking, means of two that start together at least one sees the
        other: the later by (start time, run id) lets go; the earlier waits for that. ``ours``:
        lock URLs this same run holds (the other cache prefixes of one dataset)."""
        try:
            self._exclude_overlaps(listed_urls, ours)
        except TransientError as exc:
            self.release()
            raise still_failing(self.location.url, exc, "the locks of overlapping prefixes cannot be read") from None

    def _exclude_overlaps(self, listed_urls: Iterable[str], ours: Collection[str]) -> None:
        for url in ancestor_locks(self.location) + nested_locks(self.location, listed_urls):
            if url in ours:
                continue
            holder, exists = _holder_at(self.store, url)
            if not exists:
                continue
            mine = (self.holder.since, self.holder.run_id)
            first = holder is not None and not holder.gone and mine < (holder.since, holder.run_id)
            if first and self._outwaited(url):
                continue
            self.release()
            raise overlap_error(self.location, url, holder)

    def _outwaited(self, url: str) -> bool:
        """Whether the later repair's lock at ``url`` goes within :attr:`outwait`."""
        deadline = time.monotonic() + self.outwait
        while self.store.head(url) is not None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def release(self) -> None:
        """Delete the lock object if it is still ours (a lock someone cleared and took since is
        theirs now): known by its ETag where that is our bytes' MD5 (a plain PUT's), else read.
        One the endpoint fails to delete is left, and the line says what clears it."""
        if not self.held:
            return
        self.held = False
        try:
            self._delete_if_ours()
        except TransientError as exc:
            then = f"the lock is left; once the endpoint answers, `cachedoctor recover {self.location.url} --apply` clears it"
            raise still_failing(self.url, exc, "cannot be deleted", then) from None

    def _delete_if_ours(self) -> None:
        info = self.store.head(self.url)
        if info is None:
            return
        try:
            if info.etag == hashlib.md5(self.holder.to_bytes(), usedforsecurity=False).hexdigest():
                self.store.delete_if_match(self.url, info.etag)
                return
            holder = Holder.parse(self.store.read_whole(info, _LOCK_LIMIT))
        except (ObjectGone, ObjectChanged):
            return  # gone, or replaced since the HEAD: not ours
        if holder is not None and (holder.run_id, holder.pid, holder.host) == self._mine():
            self.store.delete(self.url)

    def _mine(self) -> tuple[str, int, str]:
        return self.holder.run_id, self.holder.pid, self.holder.host

    def __enter__(self) -> PrefixLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


__all__ = [
    "Holder",
    "PrefixLock",
    "PrefixLocked",
    "ancestor_locks",
    "journal_home",
    "lock_url",
    "nested_locks",
    "own_key",
    "read_holder",
]
