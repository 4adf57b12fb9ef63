"""The scan's reader processes: chunks of files out, outcomes back, a bounded number in flight.

Every file a scan reads is read here, ``--workers 1`` included (one forked worker, started once:
a fork costs milliseconds, and the readers the parent has imported come with it), so that no
file is ever read by the process that must survive it. The parent holds no file's bytes.

Each worker runs under a memory cap (``_memcap.py``: ``RLIMIT_DATA``, :data:`~cachedoctor.scan.
_memcap.FILE_MEMORY` per file) and the time watchdog (``watchdog.py``). A worker that a file
keeps busy past ``--file-timeout`` (plus ``watchdog.GRACE``) despite its own alarm is killed.
``ProcessPoolExecutor`` then fails every chunk still in flight, so they are all sent again to a
fresh pool, except that the stuck file itself is reported as ``read-timeout`` and not read
again. A worker that dies on its own (an allocation that aborts, a crash) takes the pool down
the same way, without saying which: each chunk that was on a file is sent again with that
file first and read alone, nothing else in flight; a file whose reader dies again there is
reported (``unsafe-pickle``, ``resource-bomb``: it cannot be shown safe) and the rest of its
chunk read as usual. Workers die with the parent (``PR_SET_PDEATHSIG``): a SIGKILLed scan
leaves no reader behind holding its stdout.
"""

from __future__ import annotations

import os
import signal
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from cachedoctor.lifetime import die_with_parent
from cachedoctor.scan._memcap import FILE_MEMORY, cap_memory
from cachedoctor.scan.folders import Collector
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.watchdog import Slots, attach
from cachedoctor.scan.worker import died, inspect_chunk, timed_out

Chunk = tuple[int, list[tuple[str, bool]], bool, bool]  # folder id, (path, deep) items, facts, digest


@dataclass(slots=True)
class _Job:
    folder_id: int
    items: list[tuple[str, bool]]
    facts: bool
    digest: bool
    done: list[Outcome] = field(default_factory=list)  # outcomes settled before a pool was replaced
    slot: int = -1
    alone: bool = False  # its first file's reader died: read with nothing else in flight


def _init_worker(parent: int, slots: Any, cpu: Any, memory: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    die_with_parent(parent)  # a SIGKILLed scan leaves no reader behind holding its stdout
    attach(slots, cpu)
    cap_memory(memory)


def run_pool(
    chunks: Iterator[Chunk],
    workers: int,
    collector: Collector,
    timeout: float | None,
    memory: int | None = FILE_MEMORY,
) -> None:
    """Read ``chunks`` on ``workers`` processes into ``collector``; ``timeout``: seconds per file
    (``--file-timeout``); ``memory``: bytes per file (``None``: no cap)."""
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    limit = workers * 4
    slots = Slots(limit, context)
    queue: deque[_Job] = deque()
    in_flight: dict[Future, _Job] = {}
    source = (_Job(f, items, facts, digest) for f, items, facts, digest in chunks)

    def new() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(os.getpid(), slots.array, slots.cpu, memory),
        )

    pool = new()
    tick = None if not timeout else min(1.0, timeout / 4)
    try:
        while True:
            while len(in_flight) < limit and not any(j.alone for j in in_flight.values()):
                job = _next(queue, source, bool(in_flight))
                if job is None:
                    break
                job.slot = slots.take()
                in_flight[pool.submit(inspect_chunk, job.items, job.facts, job.digest, timeout, job.slot)] = job
            if not in_flight:
                break
            done, _ = wait(in_flight, timeout=tick, return_when=FIRST_COMPLETED)
            for future in done:
                if future.exception() is None:
                    _finish(in_flight.pop(future), future.result(), slots, collector)
            failed = [exc for f in done if (exc := f.exception()) is not None]
            stuck = _stuck(in_flight, slots, timeout) if timeout else []
            if failed or stuck:
                pool = _replace(pool, stuck, in_flight, queue, slots, collector, timeout or 0.0, memory, new)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _next(queue: deque[_Job], source: Iterator[_Job], busy: bool) -> _Job | None:
    """The next chunk to send: those sent again first; one to be read alone only when nothing
    else is in flight."""
    if queue:
        if queue[0].alone and busy:
            return None
        return queue.popleft()
    return next(source, None)


def _finish(job: _Job, outcomes: list[Outcome], slots: Slots, collector: Collector) -> None:
    """A chunk's outcomes to the collector, with those settled before a pool was replaced."""
    slots.give_back(job.slot)
    collector.add(job.folder_id, job.done + outcomes)


def _stuck(in_flight: dict[Future, _Job], slots: Slots, timeout: float) -> list[tuple[_Job, int, int]]:
    found = []
    for job in in_flight.values():
        hit = slots.stuck(job.slot, timeout)
        if hit is not None:
            found.append((job, hit[0], hit[1]))
    return found


def _replace(
    pool: ProcessPoolExecutor,
    stuck: list[tuple[_Job, int, int]],
    in_flight: dict[Future, _Job],
    queue: deque[_Job],
    slots: Slots,
    collector: Collector,
    timeout: float,
    memory: int | None,
    new: Callable[[], ProcessPoolExecutor],
) -> ProcessPoolExecutor:
    """Kill the stuck workers, settle what finished, and queue the rest for a fresh pool: a
    stuck file is reported (``read-timeout``); a file whose reader died is read again alone
    first, and reported if its reader dies there again."""
    for _, pid, _ in stuck:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait(in_flight)  # the executor fails every chunk still running once a worker dies
    pool.shutdown(wait=True, cancel_futures=True)
    halted = {id(job): index for job, _, index in stuck}
    again: list[_Job] = []
    suspects = 0
    for future, job in list(in_flight.items()):
        del in_flight[future]
        slots.give_back(job.slot)
        exc = future.exception()
        if exc is None:
            collector.add(job.folder_id, job.done + future.result())
            continue
        if not isinstance(exc, BrokenProcessPool):
            raise exc
        index = halted.get(id(job))
        if index is not None:  # the stuck file is reported; the others are read again
            path = job.items[index][0]
            job.done.append(timed_out(path, timeout))
            job.items = job.items[:index] + job.items[index + 1 :]
        elif not stuck and 0 <= (on := slots.index(job.slot)) < len(job.items):  # on a file as a reader died
            suspects += 1
            if job.alone and on == 0:  # it died alone on this file: the file is reported
                job.done.append(died(job.items[0][0], memory))
                job.items, job.alone = job.items[1:], False
            else:  # read that file first, alone
                job.items = [job.items[on]] + job.items[:on] + job.items[on + 1 :]
                job.alone = True
        if not job.items:
            collector.add(job.folder_id, job.done)
            continue
        again.append(job)
    if not stuck and not suspects:
        raise BrokenProcessPool("a scan worker died between files")  # not a file's doing: stop
    again.sort(key=lambda j: not j.alone)
    queue.extendleft(reversed(again))
    return new()
