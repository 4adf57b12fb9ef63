"""What a rank says when its own share fails, and the crash tests' hooks that kill or stop a rank
at a named point (as ``lifetime.kill_due`` does for repair's crash tests): real signals, sent by
the rank to itself, where a test could not otherwise time them."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from cachedoctor.errors import PathError, UsageError

POLL_S = 0.1


def line_of(exc: BaseException) -> str | None:
    """The one line a rank's own failure would have printed; ``None`` for a bug."""
    if isinstance(exc, PathError):
        return f"{exc.path}: {exc.message}"
    if isinstance(exc, UsageError):
        return str(exc)
    from cachedoctor.faults import last_resort

    return last_resort(exc) if isinstance(exc, Exception) else None


def seconds(text: str | None, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default


def test_kill(rank: int, world: int, store: Any, namespace: str) -> None:
    """Crash tests: ``CACHEDOCTOR_TEST_KILL_RANK=R`` SIGKILLs rank R as it is about to share its
    part, once every rank has joined (a rank killed before another even started is the
    launcher's to report: that one never learns it was part of a run)."""
    if os.environ.get("CACHEDOCTOR_TEST_KILL_RANK") == str(rank):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(store.check([f"{namespace}/host/{r}"]) for r in range(world)):
            time.sleep(POLL_S)
        os.kill(os.getpid(), signal.SIGKILL)


def test_hang(rank: int) -> None:
    """Crash tests: ``CACHEDOCTOR_TEST_HANG_RANK=R`` stops rank R (SIGSTOP, its heartbeat with it)
    as it is about to share its part."""
    if os.environ.get("CACHEDOCTOR_TEST_HANG_RANK") == str(rank):
        os.kill(os.getpid(), signal.SIGSTOP)


__all__ = ["line_of", "seconds", "test_hang", "test_kill"]
