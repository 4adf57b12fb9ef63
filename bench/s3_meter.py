"""The S3 benchmark's proxy and meter: the delaying proxy in front of moto, and what each timing
cost there (requests by kind, response-body bytes) and in CPU seconds (moto's, this process's,
its children's). ``s3_scan_bench.py`` makes one and starts and settles it around every timing.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Any

from shard_runs import delay_all, process_cpu

TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)

from s3_proxy import S3Proxy  # noqa: E402


class Meter:
    """The delaying proxy in front of moto, and what each timing cost there and in CPU seconds.

    :meth:`start` begins a timing, :meth:`settle` ends it. An in-process row does both around its
    work; a command row starts in its ``prepare`` and is settled by whatever runs next (the next
    row's start, or ``finish``): nothing else talks to the proxy in between. ``taken[key]`` holds
    one entry per timing, in the runner's order (``seconds_all``'s)."""

    def __init__(self, upstream: str, server_pid: int, bucket: str, delay_ms: float) -> None:
        self.proxy = S3Proxy(upstream, keep_alive=True)  # S3 keeps connections open; moto does not
        self.server_pid, self.bucket = server_pid, bucket
        atexit.register(self.proxy.stop)
        self.url = self.proxy.url
        self.delay = delay_ms / 1000
        self.taken: dict[str, list[dict[str, Any]]] = {}
        self._open: tuple[str, float, float, float] | None = None
        delay_all(self.proxy, self.delay)

    def start(self, key: str) -> None:
        self.settle()
        delay_all(self.proxy, self.delay)  # the counts start from zero; every request still delayed
        t = os.times()
        self._open = (key, process_cpu(self.server_pid), t.user + t.system, t.children_user + t.children_system)

    def settle(self) -> None:
        if self._open is None:
            return
        key, server0, own0, children0 = self._open
        self._open = None
        t = os.times()
        kinds: dict[str, int] = {}
        for method, path in list(self.proxy.log):
            kind = "LIST" if method == "GET" and path.strip("/") == self.bucket else method
            kinds[kind] = kinds.get(kind, 0) + 1
        self.taken.setdefault(key, []).append(
            {
                "requests": dict(sorted(kinds.items())),
                "server_requests": self.proxy.count(),
                "server_body_bytes": self.proxy.body_bytes,
                "server_cpu_s": round(process_cpu(self.server_pid) - server0, 3),
                "own_cpu_s": round(t.user + t.system - own0, 3),
                "children_cpu_s": round(t.children_user + t.children_system - children0, 3),
            }
        )

    def fastest(self, key: str, seconds_all: list[float]) -> dict[str, Any]:
        """The figures of the row's fastest timing (the one its other extras come from)."""
        taken = self.taken.get(key, [])
        if len(taken) != len(seconds_all):
            return {}
        return taken[seconds_all.index(min(seconds_all))]
