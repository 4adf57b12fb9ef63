"""How runs end: workers die with the process that started them, and Ctrl-C stays Ctrl-C.

A SIGKILLed ``scan`` or ``repair`` must not leave workers behind: they would hold the parent's
stdout and stderr open (a caller waiting for EOF hangs), keep reading a cache that a new run is
repairing, or write behind its back. Linux's ``PR_SET_PDEATHSIG`` has the kernel send SIGKILL
when the parent dies; the check after it closes the window in which the parent died before the
call was made (repair's spawned workers pass the parent's pid too: they start a whole Python
before they get there). Elsewhere it does nothing. What such a kill leaves for a moment are
zombies: dead workers reparented to pid 1, which may take seconds to reap them; the crash tests
check the killed run's process group for processes still alive, not for zombies.

Crash tests stop real runs at named points (:func:`kill_due`, ``CACHEDOCTOR_TEST_KILL_*``).

Ctrl-C can land inside a lazy import (numpy on the first deep read, torch on the first
rewrite), where Python may wrap the ``KeyboardInterrupt`` in another exception: on 3.11 an
interrupt inside a class body's ``__set_name__`` becomes a ``RuntimeError``. The broad
``except Exception`` that keeps one damaged file from stopping a scan would then turn the
user's Ctrl-C into a finding or an "internal error" (exit 2). Each such handler calls
:func:`reraise_interrupt` first.
"""

from __future__ import annotations

import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """In a worker: be killed when the parent dies; exit now if ``parent`` is already gone."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a ``KeyboardInterrupt`` (its ``__cause__``/``__context__`` chain)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def reraise_interrupt(exc: BaseException) -> None:
    """Raise ``KeyboardInterrupt`` if ``exc`` was caused by one; otherwise do nothing."""
    if caused_by_interrupt(exc):
        raise KeyboardInterrupt from exc


_KILL_COUNTS: dict[str, int] = {}


def kill_due(variable: str) -> bool:
    """Crash tests only: whether this is the N-th call for ``variable`` (``VARIABLE=N`` in the
    environment), where the caller SIGKILLs itself with :func:`kill_self`. Unset: always False."""
    target = os.environ.get(variable)
    if not target:
        return False
    _KILL_COUNTS[variable] = _KILL_COUNTS.get(variable, 0) + 1
    return _KILL_COUNTS[variable] == int(target)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["caused_by_interrupt", "die_with_parent", "kill_due", "kill_self", "reraise_interrupt"]
