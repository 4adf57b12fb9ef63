"""Read remote objects on a bounded pool of threads and judge them as local files are judged.

Reading an object is waiting for the network, so threads, not processes: ``--workers/-j`` is
the number of requests in flight (default :data:`DEFAULT_JOBS`, at most :data:`MAX_JOBS`, the
store's connection pool). A quick read goes through :class:`~cachedoctor.remote.source.
RemoteSource` (one ranged GET for an object up to 256 KB, head and tail windows otherwise); a
deep read downloads the object once and runs the CRC, NaN and digest passes on those bytes.
The verdict is the local one (``worker.py``'s ``_judged``, ``_judged_error``, ``_reader_bug``).

Faults, per object: gone since the listing -> skipped, as a local file that vanished; changed
(another ETag) -> HEAD once and read the new version; changed again -> an error naming it
("changed while being read; rerun"); still failing after the store's retries -> an error (the
scan is incomplete, exit 2). A :class:`~cachedoctor.remote.RemoteError` (credentials revoked,
the bucket deleted) stops the whole scan: it would fail every object the same way.

``--file-timeout`` bounds each object from the parent's side: a thread cannot be interrupted,
so an object not judged in time is reported (``read-timeout``) and its thread's late answer
dropped; the thread itself ends by the readers' own bounds and ``RemoteSource.MAX_REQUESTS``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from cachedoctor.cachenames import claims_cache
from cachedoctor.checks import Inspected, is_temp_name
from cachedoctor.formats import FileMeta, ReadError
from cachedoctor.lifetime import reraise_interrupt
from cachedoctor.remote.interface import (
    ObjectChanged,
    ObjectGone,
    ObjectInfo,
    ObjectStore,
    RemoteError,
    TransientError,
)
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.worker import _FOREIGN_PROBLEMS, _judge, _judged, _judged_error, _reader_bug, timed_out

if TYPE_CHECKING:
    from cachedoctor.remote.source import RemoteSource

#: A quick read takes an object up to this size in one request: RemoteSource's head (256 KB)
#: and tail (64 KB) windows would take two requests and 320 KB of an SDXL fp32 latent of 258 KB,
#: and on S3 (and here, on moto) a request costs more than a few hundred KB.
WHOLE_UP_TO = 512 << 10

DEFAULT_JOBS = 32
MAX_JOBS = 64  # S3Store's connection pool: more threads would only queue for a connection

CHANGED_TWICE = "changed while being read (its ETag changed twice); rerun the scan when its writer is done"


def jobs_for(workers: int | None) -> int:
    """Requests in flight for ``--workers`` (``None``: the default)."""
    return max(1, min(workers or DEFAULT_JOBS, MAX_JOBS))


class _Watched:
    """The store as the readers see it: the first store fault raised under a reader is kept,
    so that a reader catching broadly (a damaged pickle raises anything) cannot turn a network
    fault into a verdict on the object. ``RemoteSource`` only ever calls ``read_range``."""

    def __init__(self, store: ObjectStore) -> None:
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


def read_object(
    store: ObjectStore, info: ObjectInfo, deep: bool, facts: bool, digest: bool
) -> tuple[Outcome, ObjectInfo]:
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


def _read_once(store: ObjectStore, info: ObjectInfo, deep: bool, facts: bool, digest: bool) -> Outcome:
    from cachedoctor.formats import _dispatch
    from cachedoctor.formats._source import BufferSource
    from cachedoctor.remote.source import RemoteSource

    url, size = info.url, info.size
    mtime = info.mtime_ns if facts else None
    if is_temp_name(url):  # a writer's temp object left behind: judged by its name, never read
        return _judge(Inspected(url, size, temp=True), None, mtime)
    if size == 0:
        return _judged_error(
            url, ReadError("empty", "zero bytes: the write never happened or was cut off"), 0, mtime, 0
        )
    watched = _Watched(store)
    reader_store = cast(ObjectStore, watched)
    src: RemoteSource | None = None
    taken = 0  # bytes of a whole download
    meta: FileMeta | None = None
    try:
        if deep and not claims_cache(url):  # a foreign name: downloaded only if a quick read claims it
            src = RemoteSource(reader_store, info, _first_window(info))
            try:
                if _dispatch(url, src, False) is None:
                    watched.raise_fault()
                    return _judged(url, None, lambda _: size, mtime, digest, src.bytes_read)
            except ReadError as exc:
                if exc.problem in _FOREIGN_PROBLEMS:
                    raise
        if deep:
            with _deep_bytes(store, info) as data:
                taken = len(data)
                meta = _dispatch(url, BufferSource(data), True)
        else:
            src = RemoteSource(reader_store, info, _first_window(info))
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


#: Deep reads hold at most this many bytes in memory at once across the pool; an object larger
#: than :data:`SPILL_OVER` goes to an unlinked temporary file, read by ranges and mapped, one
#: such object at a time, so a deep scan of 50 GB objects on 32 threads needs neither 1.6 TB of
#: memory nor of disk (the local scan maps files for the same reason).
MEMORY_BUDGET = 512 << 20
SPILL_OVER = 64 << 20
SPILL_CHUNK = 16 << 20


class _Budget:
    """Bytes of deep downloads in flight: ``take(n)`` waits until ``n`` fit (an object larger
    than the whole budget waits for an empty pool)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def take(self, n: int) -> Iterator[None]:
        n = min(n, self.capacity)
        with self.cond:
            self.cond.wait_for(lambda: self.used + n <= self.capacity)
            self.used += n
        try:
            yield
        finally:
            with self.cond:
                self.used -= n
                self.cond.notify_all()


_memory = _Budget(MEMORY_BUDGET)
_spill = threading.Lock()


@contextlib.contextmanager
def _deep_bytes(store: ObjectStore, info: ObjectInfo) -> Iterator[memoryview]:
    """The whole object for a deep read: in memory within the pool's budget, or spilled."""
    if info.size <= SPILL_OVER:
        with _memory.take(info.size):
            yield memoryview(store.read_whole(info, limit=info.size))
        return
    import mmap
    import tempfile

    with _spill, tempfile.TemporaryFile(prefix="cachedoctor-deep-") as sink:
        for start in range(0, info.size, SPILL_CHUNK):
            end = min(info.size, start + SPILL_CHUNK)
            chunk = store.read_range(info, start, end)
            if len(chunk) != end - start:
                raise TransientError(f"{info.url}: short read at byte {start + len(chunk)}")
            sink.write(chunk)
        sink.flush()
        mapping = mmap.mmap(sink.fileno(), info.size, prot=mmap.PROT_READ)
        view = memoryview(mapping)
        try:
            yield view
        finally:
            view.release()
            try:
                mapping.close()
            except BufferError:  # a slice still referenced: closed when freed
                pass


def _first_window(info: ObjectInfo) -> int:
    from cachedoctor.remote.source import HEAD_WINDOW

    return info.size if info.size <= WHOLE_UP_TO else HEAD_WINDOW


def _taken(src: RemoteSource | None, whole: int) -> int:
    """The bytes a read took from the store (``Outcome.io_bytes``)."""
    return whole + (src.bytes_read if src is not None else 0)


@dataclass(slots=True)
class Job:
    """One object to read, and where its outcome goes."""

    folder_id: int
    store: ObjectStore
    info: ObjectInfo
    deep: bool
    facts: bool
    digest: bool
    started: float = 0.0  # monotonic, when its thread took it up


Done = Callable[[Job, Outcome, ObjectInfo], None]


def read_all(jobs: Iterator[Job], workers: int, timeout: float | None, done: Done) -> None:
    """Read every job on ``workers`` threads, ``workers`` requests in flight; ``done`` is called
    in this thread, in completion order. A store's ``RemoteError`` stops the reads and is raised."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cachedoctor-read")
    in_flight: dict[Future[tuple[Outcome, ObjectInfo]], Job] = {}
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
                    if job.started and now - job.started > timeout:
                        del in_flight[future]  # its thread ends by the readers' bounds; its answer is dropped
                        done(job, replace(timed_out(job.info.url, timeout), size=job.info.size), job.info)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=False)


def _run(job: Job) -> tuple[Outcome, ObjectInfo]:
    job.started = time.monotonic()
    return read_object(job.store, job.info, job.deep, job.facts, job.digest)


__all__ = ["DEFAULT_JOBS", "MAX_JOBS", "Job", "jobs_for", "read_all", "read_object"]
