"""A per-file time guard, so that no file can stall a scan (``--file-timeout``, default 10 s).

Every reader is bounded, so a file that still takes seconds was built to defeat the bounds or
sits on storage that stalls. Two layers stop it:

* inside the process reading it, ``SIGALRM`` interrupts Python code after ``seconds`` of a
  read that keeps the CPU busy, or after ``STARVED * seconds`` of one that waits (on storage,
  or on a CPU other processes hold) (:func:`file_timer`): the file is reported as
  ``read-timeout`` and the worker goes on;
* a C call that ignores signals (a decompressor, a huge allocation, a dict insert under a hash
  flood) is caught by the parent: each worker notes in a shared slot which file of its chunk it
  is on, since when, and its CPU time then; the parent reads the worker's CPU time from
  ``/proc/<pid>/stat`` and kills a worker whose file is :func:`overdue` by the same rule plus a
  grace period (:class:`Slots`): a busy C call is stopped ``GRACE`` seconds after the alarm
  would have fired, a waiting one after ``STARVED * seconds + GRACE``. The pool is then
  replaced, the file reported, and the rest of the chunks read again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: How much longer than ``--file-timeout`` the parent waits before it kills a worker: the
#: worker's own alarm should have fired by then.
GRACE = 2.0


#: A file whose reader is not working (waiting on storage, or starved of the CPU by a machine
#: under load) gets this many times ``--file-timeout`` of wall time before it is given up on:
#: a healthy 2 KB file once timed out while another process hammered the disk.
STARVED = 3


def overdue(wall: float, cpu: float, limit: float) -> bool:
    """Whether a read that took ``wall`` seconds, ``cpu`` of them on the CPU, is out of time: past
    ``limit`` while working (a bomb burns CPU), or past ``STARVED * limit`` whatever it did."""
    return wall >= STARVED * limit or (wall >= limit and cpu >= limit / 4)


class FileTimeout(BaseException):
    """Raised inside a read that ran out of time. A ``BaseException``, so that the readers'
    ``except Exception`` (one damaged file must not stop a scan) cannot swallow it."""


@contextlib.contextmanager
def file_timer(seconds: float | None) -> Iterator[Callable[[bool], None]]:
    """Yield ``arm(on)``: ``arm(True)`` gives the code that follows ``seconds`` before
    :class:`FileTimeout` is raised in it, ``arm(False)`` stops the clock.

    One interval timer ticks for the whole chunk (a quarter of ``seconds``, at most 1 s) and
    its handler compares the clock with the current file's start, so arming costs one
    ``monotonic()`` per file instead of two ``setitimer`` calls. Outside the main thread, or
    without ``seconds``, ``arm`` does nothing.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield lambda on: None
        return
    limit = seconds
    started = [0.0, 0.0]  # wall clock, this process's CPU time
    clock, cpu = time.monotonic, time.process_time

    def expire(signum: int, frame: Any) -> None:
        if started[0] and overdue(clock() - started[0], cpu() - started[1], limit):
            started[0] = 0.0
            raise FileTimeout

    def arm(on: bool) -> None:
        started[0], started[1] = (clock(), cpu()) if on else (0.0, 0.0)

    tick = min(1.0, seconds / 4)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, tick, tick)
    try:
        yield arm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, from ``/proc``; ``None`` where
    there is no such file (another OS, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Slots:
    """Shared memory in which each in-flight chunk's worker records ``(pid, file index, start)``,
    and, in a second array, the worker's CPU time at that start."""

    def __init__(self, count: int, context: Any) -> None:
        self.array = context.RawArray("d", count * 3)
        self.cpu = context.RawArray("d", count)
        self.free = list(range(count - 1, -1, -1))

    def take(self) -> int:
        slot = self.free.pop()
        self.array[slot * 3 : slot * 3 + 3] = [0.0, -1.0, 0.0]
        self.cpu[slot] = 0.0
        return slot

    def index(self, slot: int) -> int:
        """The file of its chunk that the worker of ``slot`` is on (``-1``: none, or done)."""
        return int(self.array[slot * 3 + 1])

    def give_back(self, slot: int) -> None:
        self.free.append(slot)

    def stuck(self, slot: int, seconds: float) -> tuple[int, int] | None:
        """``(pid, file index)`` when the chunk in ``slot`` has been on one file for too long."""
        pid, index, started = self.array[slot * 3 : slot * 3 + 3]
        # ``started`` is 0 between a slot's take() and its worker's first mark(): a read that
        # catches the worker between its writes must not see "on a file since boot".
        if not (pid and index >= 0 and started > 0):
            return None
        wall = time.monotonic() - started - GRACE
        if wall < seconds:
            return None
        now = cpu_seconds(int(pid))
        cpu = now - self.cpu[slot] if now is not None and self.cpu[slot] > 0 else 0.0
        return (int(pid), int(index)) if overdue(wall, cpu, seconds) else None


_worker_slots: Any = None  # the shared arrays, in a worker process
_worker_cpu: Any = None


def attach(array: Any, cpu: Any = None) -> None:
    """In a worker: remember the shared slots (called by the pool initializer)."""
    global _worker_slots, _worker_cpu
    _worker_slots, _worker_cpu = array, cpu


def mark(slot: int | None, index: int) -> None:
    """In a worker: chunk ``slot`` is starting its file ``index`` now (``-1``: done)."""
    if slot is None or _worker_slots is None:
        return
    base = slot * 3
    if _worker_cpu is not None:
        _worker_cpu[slot] = time.process_time() or 1e-9  # 0 reads as "not written yet"
    _worker_slots[base + 2] = time.monotonic()  # the time first: the parent reads the three fields unlocked
    _worker_slots[base + 1] = index
    _worker_slots[base] = os.getpid()
