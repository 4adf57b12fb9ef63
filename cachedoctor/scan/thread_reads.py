"""Read the objects of a store that no worker process can open (``Capabilities.local_paths``
false: an object store), on a bounded pool of threads, and judge them as local files are judged.

Reading such an object is waiting for the network, so threads, not processes: ``--workers/-j``
is the number of requests in flight (default :data:`DEFAULT_JOBS`, at most :data:`MAX_JOBS`,
the store's connection pool). A quick read goes through :class:`~cachedoctor.stores.source.
RangeSource` (one ranged read for an object up to 512 KB, head and tail windows otherwise); a
deep read fetches the object once (``deep_bytes.py``) and runs the CRC, NaN and digest passes
on those bytes. The verdict is the one worker processes give (``worker.py``'s ``_judged``,
``_judged_error``, ``_reader_bug``), and only ``Store`` methods are called, so any store serves.

Faults, per object: gone since the listing -> skipped, as a local file that vanished; changed
(another version) -> HEAD once and read the new version; changed again -> an error naming it
("changed while being read; rerun"); still failing after the store's retries -> an error (the
scan is incomplete, exit 2). A :class:`~cachedoctor.stores.RemoteError` (credentials revoked,
the bucket deleted) stops the whole scan: it would fail every object the same way.

``--file-timeout`` bounds each object from the parent's side: a thread cannot be interrupted,
so an object not judged in time is reported (``read-timeout``) and its thread's late answer
dropped; the thread itself ends by the readers' own bounds and ``RangeSource.MAX_REQUESTS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, cast

from cachedoctor.cachenames import claims_cache
from cachedoctor.checks import Inspected, is_temp_name
from cachedoctor.formats import FileMeta, ReadError
from cachedoctor.lifetime import reraise_interrupt
from cachedoctor.scan.deep_bytes import deep_bytes
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.worker import _FOREIGN_PROBLEMS, _judge, _judged, _judged_error, _reader_bug, timed_out
from cachedoctor.stores.interface import (
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    RemoteError,
    Store,
    TransientError,
)

if TYPE_CHECKING:
    from cachedoctor.stores.source import RangeSource

#: A quick read takes an object up to this size in one request: RangeSource's head (256 KB)
#: and tail (64 KB) windows would take two requests and 320 KB of an SDXL fp32 latent of 258 KB,
#: and on S3 (and here, on moto) a request costs more than a few hundred KB.
WHOLE_UP_TO = 512 << 10

DEFAULT_JOBS = 32
MAX_JOBS = 64  # S3Store's connection pool: more threads would only queue for a connection

_R = TypeVar("_R")

CHANGED_TWICE = "changed while being read (its ETag changed twice); rerun the scan when its writer is done"


def jobs_for(workers: int | None) -> int:
    """Requests in flight for ``--workers`` (``None``: the default)."""
    return max(1, min(workers or DEFAULT_JOBS, MAX_JOBS))


class _Watched:
    """The store as the readers see it: the first store fault raised under a reader is kept,
    so that a reader catching broadly (a damaged pickle raises anything) cannot turn a network
    fault into a verdict on the object. ``RangeSource`` only ever calls ``read_range``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.fault: BaseException | None = None

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        try:
            return self.store.read_range(info, start, end)
        except BaseException as exc:
            self.fault = self.fault or exc
            raise

    def raise_fault(self) -> None:
        if self.fault is not None:
            raise self.fault


class _Timed:
    """The store as one job uses it, timing its waits on the network (:class:`Job`'s clock):
    ``--file-timeout`` bounds what the readers do with the bytes, not how long a slow link takes
    to bring them (a healthy 50 MB object over 5 MB/s is no hostile file). Waiting is bounded by
    the store itself (a stalled request ends after ``RetryPolicy.stall``, twice)."""

    def __init__(self, store: Store, job: Job) -> None:
        self.store = store
        self.job = job

    def _timed(self, call: Callable[[], _R]) -> _R:
        self.job.io_since = time.monotonic()
        try:
            return call()
        finally:
            self.job.io_seconds += time.monotonic() - self.job.io_since
            self.job.io_since = 0.0

    def read_range(self, info: ObjectInfo, start: int, end: int) -> bytes:
        return self._timed(lambda: self.store.read_range(info, start, end))

    def read_whole(self, info: ObjectInfo, limit: int) -> bytes:
        return self._timed(lambda: self.store.read_whole(info, limit))

    def head(self, url: str) -> ObjectInfo | None:
        return self._timed(lambda: self.store.head(url))


def read_object(store: Store, info: ObjectInfo, deep: bool, facts: bool, digest: bool) -> tuple[Outcome, ObjectInfo]:
    """One object judged, with the facts it was judged by (a fresh HEAD's after a change)."""
    for attempt in (0, 1):
        try:
            return _read_once(store, info, deep, facts, digest), info
        except ObjectGone:
            return Outcome(info.url, 0, "skipped"), info
        except ObjectChanged:
            if attempt:
                return Outcome(info.url, info.size, "error", error=CHANGED_TWICE), info
            fresh = store.head(info.url)
            if fresh is None:
                return Outcome(info.url, 0, "skipped"), info
            info = fresh
        except TransientError as exc:
            message = str(exc).removeprefix(f"{info.url}: ")
            return Outcome(info.url, info.size, "error", error=f"could not be read ({message})"), info
    raise AssertionError("unreachable")  # pragma: no cover


def _read_once(store: Store, info: ObjectInfo, deep: bool, facts: bool, digest: bool) -> Outcome:
    from cachedoctor.formats import _dispatch
    from cachedoctor.formats._source import BufferSource
    from cachedoctor.stores.source import RangeSource

    url, size = info.url, info.size
    mtime = info.mtime_ns if facts else None
    if is_temp_name(url):  # a writer's temp object left behind: judged by its name, never read
        return _judge(Inspected(url, size, temp=True), None, mtime)
    if size == 0:
        return _judged_error(
            url, ReadError("empty", "zero bytes: the write never happened or was cut off"), 0, mtime, 0
        )
    watched = _Watched(store)
    reader_store = cast(Store, watched)
    src: RangeSource | None = None
    taken = 0  # bytes of a whole download
    meta: FileMeta | None = None
    try:
        if deep and not claims_cache(url):  # a foreign name: downloaded only if a quick read claims it
            src = RangeSource(reader_store, info, WHOLE_UP_TO)
            try:
                if _dispatch(url, src, False) is None:
                    watched.raise_fault()
                    return _judged(url, None, lambda _: size, mtime, digest, src.bytes_read)
            except ReadError as exc:
                if exc.problem in _FOREIGN_PROBLEMS:
                    raise
        if deep:
            with deep_bytes(store, info) as data:
                taken = len(data)
                meta = _dispatch(url, BufferSource(data, digest=digest), True)
        else:
            src = RangeSource(reader_store, info, WHOLE_UP_TO)
            meta = _dispatch(url, src, False)
    except ReadError as exc:
        watched.raise_fault()
        return _judged_error(url, exc, size, mtime, _taken(src, taken))
    except MemoryError:
        error = ReadError("too-large", "file structure asks for more memory than is available")
        return _judged_error(url, error, size, mtime, _taken(src, taken))
    except (ObjectGone, ObjectChanged, TransientError, RemoteError):
        raise
    except Exception as exc:  # a reader bug must not stop a scan of a million objects
        reraise_interrupt(exc)
        watched.raise_fault()
        return _reader_bug(url, exc, size, mtime, _taken(src, taken))
    watched.raise_fault()
    return _judged(url, meta, lambda _: size, mtime, digest, _taken(src, taken))


def _taken(src: RangeSource | None, whole: int) -> int:
    """The bytes a read took from the store (``Outcome.io_bytes``)."""
    return whole + (src.bytes_read if src is not None else 0)


@dataclass(slots=True)
class Job:
    """One object to read, and where its outcome goes."""

    folder_id: int
    store: Store
    info: ObjectInfo
    deep: bool
    facts: bool
    digest: bool
    started: float = 0.0  # monotonic, when its thread took it up
    io_seconds: float = 0.0  # time spent waiting on the store so far (not the readers' time)
    io_since: float = 0.0  # monotonic start of the wait in progress, 0.0 when none

    def reader_seconds(self, now: float) -> float:
        """How long the readers have worked on the object: the time since it was taken up,
        less the waits on the network."""
        waiting = self.io_seconds + (now - self.io_since if self.io_since else 0.0)
        return now - self.started - waiting


Done = Callable[[Job, Outcome, ObjectInfo], None]


def read_all(jobs: Iterator[Job], workers: int, timeout: float | None, done: Done) -> None:
    """Read every job on ``workers`` threads, ``workers`` requests in flight; ``done`` is called
    in this thread, in completion order. A store's ``RemoteError`` stops the reads and is raised."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cachedoctor-read")
    in_flight: dict[Future[tuple[Outcome, ObjectInfo]], Job] = {}
    abandoned: list[Job] = []
    tick = None if not timeout else min(1.0, timeout / 4)
    try:
        while True:
            while len(in_flight) < workers:
                job = next(jobs, None)
                if job is None:
                    break
                in_flight[pool.submit(_run, job)] = job
            if not in_flight:
                break
            finished, _ = wait(in_flight, timeout=tick, return_when=FIRST_COMPLETED)
            for future in finished:
                job = in_flight.pop(future)
                outcome, info = future.result()  # a RemoteError stops the scan here
                done(job, outcome, info)
            if timeout:
                now = time.monotonic()
                for future, job in list(in_flight.items()):
                    if job.started and job.reader_seconds(now) > timeout:
                        del in_flight[future]  # its thread ends by the readers' bounds; its answer is dropped
                        abandoned.append(job)
                        done(job, replace(timed_out(job.info.url, timeout), size=job.info.size), job.info)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        _abandon(abandoned + list(in_flight.values()))
        raise
    _abandon(abandoned)
    pool.shutdown(wait=False)


def _abandon(jobs: list[Job]) -> None:
    """Cancel the requests of jobs the scan no longer waits for, so that their threads end now
    rather than hold the process's exit until their stores' timeouts (each thread is joined at
    exit). Called once every other job is done: nothing else is in flight then."""
    for store in {id(job.store): job.store for job in jobs}.values():
        store.cancel_all()


def _run(job: Job) -> tuple[Outcome, ObjectInfo]:
    job.started = time.monotonic()
    store = cast(Store, _Timed(job.store, job))
    return read_object(store, job.info, job.deep, job.facts, job.digest)


__all__ = ["DEFAULT_JOBS", "MAX_JOBS", "Job", "jobs_for", "read_all", "read_object"]
