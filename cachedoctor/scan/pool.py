"""The scan's reader processes: chunks of files out, outcomes back, a bounded number in flight.

A worker that a file keeps busy past ``--file-timeout`` (plus ``watchdog.GRACE``) despite its own
alarm is killed. ``ProcessPoolExecutor`` then fails every chunk still in flight, so they are all
sent again to a fresh pool, except that the stuck file itself is reported as ``read-timeout``
and not read again. Workers die with the parent (``PR_SET_PDEATHSIG``): a SIGKILLed scan leaves
no reader behind holding its stdout.
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
from cachedoctor.scan.folders import Collector
from cachedoctor.scan.outcome import Outcome
from cachedoctor.scan.watchdog import Slots, attach
from cachedoctor.scan.worker import inspect_chunk, timed_out

Chunk = tuple[int, list[tuple[str, bool]], bool, bool]  # folder id, (path, deep) items, facts, digest


@dataclass(slots=True)
class _Job:
    folder_id: int
    items: list[tuple[str, bool]]
    facts: bool
    digest: bool
    done: list[Outcome] = field(default_factory=list)  # outcomes settled before a pool was replaced
    slot: int = -1


def _init_worker(parent: int, slots: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    die_with_parent(parent)  # a SIGKILLed scan leaves no reader behind holding its stdout
    attach(slots)


def run_pool(chunks: Iterator[Chunk], workers: int, collector: Collector, timeout: float | None) -> None:
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method)
    limit = workers * 4
    slots = Slots(limit, context)
    queue: deque[_Job] = deque()
    in_flight: dict[Future, _Job] = {}
    source = (_Job(f, items, facts, digest) for f, items, facts, digest in chunks)
    pool = _new_pool(workers, context, slots)
    tick = None if not timeout else min(1.0, timeout / 4)
    try:
        while True:
            while len(in_flight) < limit:
                job = queue.popleft() if queue else next(source, None)
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
            if failed and not stuck:
                raise failed[0]  # not ours: a worker died on its own
            if stuck:
                pool = _replace(
                    pool,
                    stuck,
                    in_flight,
                    queue,
                    slots,
                    collector,
                    timeout or 0.0,
                    lambda: _new_pool(workers, context, slots),
                )
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _new_pool(workers: int, context: Any, slots: Slots) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(os.getpid(), slots.array)
    )


def _finish(job: _Job, outcomes: list[Outcome], slots: Slots, collector: Collector) -> None:
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
    new: Callable[[], ProcessPoolExecutor],
) -> ProcessPoolExecutor:
    """Kill the stuck workers, settle what finished, and queue the rest for a fresh pool."""
    for _, pid, _ in stuck:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait(in_flight)  # the executor fails every chunk still running once a worker dies
    pool.shutdown(wait=True, cancel_futures=True)
    halted = {id(job): index for job, _, index in stuck}
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
        queue.appendleft(job)
    return new()
