"""Worker processes die with the process that started them.

A SIGKILLed ``scan`` or ``repair`` must not leave workers behind: they would hold the parent's
stdout and stderr open (a caller waiting for EOF hangs), keep reading a cache that a new run is
repairing, or write behind its back. Linux's ``PR_SET_PDEATHSIG`` has the kernel send SIGKILL
when the parent dies; the check after it closes the window in which the parent died before the
call was made. Elsewhere it does nothing.
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


__all__ = ["die_with_parent"]
