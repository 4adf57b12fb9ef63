"""What the benchmarks share: exiting on a could-not-run problem, importing cachedoctor from
an installed copy or the checkout, and timing one call."""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def fail(prog: str, message: str) -> NoReturn:
    """A could-not-run problem: one message on stderr, exit 2 (goals never decide the exit)."""
    print(f"{prog}: {message}", file=sys.stderr)
    raise SystemExit(2)


def import_cachedoctor(load: Callable[[], T], prog: str, what: str) -> T:
    """``load()`` from the installed cachedoctor, else from this checkout's package."""
    try:
        return load()
    except ImportError:
        if str(REPO) not in sys.path:
            sys.path.append(str(REPO))
        for name in [m for m in sys.modules if m == "cachedoctor" or m.startswith("cachedoctor.")]:
            del sys.modules[name]
        try:
            return load()
        except ImportError as exc:
            fail(prog, f"cannot import {what}: {exc}")


def severity_of(finding: Any) -> str:
    """A finding's severity as text, tolerant of API changes (the bench may outlive a rename)."""
    sev = getattr(finding, "severity", "?")
    return str(getattr(sev, "value", sev))


def scan_summary(result: Any) -> dict[str, Any]:
    """What the figures record of one scan: files read, findings by ``severity:kind``, errors."""
    kinds = Counter(f"{severity_of(f)}:{getattr(f, 'kind', '?')}" for f in result.findings)
    return {"files_read": result.stats.files_read, "findings": len(result.findings),
            "finding_kinds": dict(sorted(kinds.items())), "errors": len(getattr(result, "errors", None) or ())}


def time_once(fn: Callable[[], dict]) -> tuple[float, dict]:
    gc.collect()
    t0 = time.perf_counter()
    extra = fn()
    return time.perf_counter() - t0, extra


def round_done(r: int, rounds: int, t_round: float, t_timing: float, repeat: int, budget: float) -> bool:
    """Report round ``r`` and say whether to stop: another round would end past ``budget``
    seconds of timing (at least one round always runs)."""
    round_s = time.perf_counter() - t_round
    spent = time.perf_counter() - t_timing
    print(f"round {r + 1}/{repeat}: {round_s:.1f} s", flush=True)
    if r + 1 < repeat and spent + round_s > budget:
        print(f"     stopping after {rounds} round(s): another would pass --budget {budget:.0f} s")
        return True
    return False
