"""The one request discipline of the network stores (``s3.py``, ``gcs.py``): each request is a
coroutine run on the client library's event loop from any of the scan's threads, bounded by a
deadline, abandoned by :meth:`Retrying.cancel_all`, and retried by one policy, counted.

What a failure means is each member's (``s3_errors.final_error``, ``gcs_errors.final_error``):
``None`` for a failure worth retrying, else the exception the request ends in. What is common
is here: throttling and resets are retried with capped, jittered exponential backoff; a server
that stalls is given up on sooner than one that refuses; an endpoint that cannot be reached at
all is a :class:`RemoteError` (one line, exit 2), any other request still failing a
:class:`TransientError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from cachedoctor.stores.interface import ObjectChanged, ObjectGone, RemoteError, TransientError

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter (AWS's recommendation for throttling)."""

    attempts: int = 6
    base: float = 0.1  # seconds before the first retry, at most
    cap: float = 5.0
    #: A stalled server (no byte for ``stall`` seconds) is tried this many times, not ``attempts``:
    #: a stall is seldom cured by waiting, and each try costs the whole ``stall``.
    stall_attempts: int = 2
    stall: float = 20.0  # seconds without a byte (the clients' read timeout)
    deadline: float = 300.0  # seconds for one request, body included (a body that trickles)

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap, self.base * (2**attempt)))


class ShortRead(Exception):
    """The server sent fewer bytes than it said it would (a reset mid-body)."""


def is_stall(exc: BaseException) -> bool:
    """A request that timed out (no answer, or a body that stopped), as opposed to one refused."""
    return isinstance(exc, asyncio.TimeoutError) or type(exc).__name__ in {"ReadTimeoutError", "AioReadTimeoutError"}


def message(exc: BaseException) -> str:
    """``exc`` on one line, without botocore's "(reached max retries: 0)": its retries are off,
    and the count that means something is this module's. A message whose first line ends with a
    colon goes on (botocore's "Parameter validation failed:" gives its reason on the next)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = " ".join(lines) if lines[0].endswith(":") else lines[0]
    text = _BOTO_RETRIES.sub("", text)
    return text if len(text) <= 300 else text[:297] + "..."


_BOTO_RETRIES = re.compile(r" \(reached max retries: \d+\)")


def unreachable(exc: BaseException) -> bool:
    """No connection could be opened (refused, no such host, connect timeout), as opposed to a
    connection the server opened and then reset: aiobotocore calls both EndpointConnectionError,
    and only its cause tells them apart; aiohttp (under gcsfs, and under aiobotocore) says
    ClientConnectorError."""
    import socket

    import aiohttp

    if type(exc).__name__ == "EndpointConnectionError":
        cause = getattr(exc, "kwargs", {}).get("error")
        return cause is None or unreachable(cause)
    return type(exc).__name__ == "ConnectTimeoutError" or isinstance(
        exc, (aiohttp.ClientConnectorError, ConnectionRefusedError, socket.gaierror)
    )


class Retrying:
    """A network store's requests (mixed into its :class:`~cachedoctor.stores.interface.Store`).
    The member calls :meth:`_start_requests` in its constructor and supplies the loop its client
    runs on, how to turn ``make`` into the coroutine to run, and what a failure means."""

    policy: RetryPolicy
    bucket: str
    #: What to check when the endpoint cannot be reached at all (ends the one-line error).
    endpoint_hint = "check the endpoint and the network"

    def _start_requests(self, transient: tuple[type[BaseException], ...]) -> None:
        self.retries = 0  # requests retried (for tests and the scan's notes)
        self.requests = 0  # requests sent, retries included
        self._count_lock = threading.Lock()  # the scan's threads count here at once
        self._transient = transient
        self._inflight: set[concurrent.futures.Future[Any]] = set()

    def _loop(self) -> asyncio.AbstractEventLoop:  # pragma: no cover - interface
        raise NotImplementedError

    def _coroutine(self, make: Callable[..., Awaitable[_T]]) -> Awaitable[_T]:  # pragma: no cover - interface
        raise NotImplementedError

    def _final(self, exc: BaseException, url: str) -> Exception | None:  # pragma: no cover - interface
        raise NotImplementedError

    def _run(self, make: Callable[..., Awaitable[_T]], url: str) -> _T:
        """Run ``make`` with this store's retry policy."""
        attempt = stalls = 0
        while True:
            with self._count_lock:
                self.requests += 1
            try:
                return self._once(make, url)
            except (ObjectGone, ObjectChanged, RemoteError, TransientError):
                raise  # said by the member's own reading code (a body longer than listed), or cancelled: final
            except self._transient as exc:
                failure: BaseException = exc
                stalls += is_stall(exc)
                if stalls >= self.policy.stall_attempts:
                    raise TransientError(
                        f"{url}: no answer within {self.policy.stall:g} s, {stalls} times: the server stalls"
                    ) from None
            except Exception as exc:
                final = self._final(exc, url)
                if final is not None:
                    raise final from None
                failure = exc
            attempt += 1
            if attempt >= self.policy.attempts:
                if unreachable(failure):
                    raise RemoteError(
                        url, f"cannot reach the endpoint ({message(failure)}); {self.endpoint_hint}"
                    ) from None
                raise TransientError(f"{url}: still failing after {attempt} attempts: {message(failure)}") from None
            with self._count_lock:
                self.retries += 1
            time.sleep(self.policy.delay(attempt))

    def _once(self, make: Callable[..., Awaitable[_T]], url: str) -> _T:
        """One request on the client's loop, abandoned by :meth:`cancel_all`."""
        future: concurrent.futures.Future[_T] = asyncio.run_coroutine_threadsafe(
            _awaited(self._coroutine(make)), self._loop()
        )
        with self._count_lock:
            self._inflight.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise TransientError(f"{url}: abandoned (the command stopped waiting for it)") from None
        finally:
            with self._count_lock:
                self._inflight.discard(future)

    def cancel_all(self) -> None:
        """Abandon every request in flight (their callers get :class:`TransientError`)."""
        with self._count_lock:
            pending = list(self._inflight)
        for future in pending:
            future.cancel()


async def _awaited(step: Awaitable[_T]) -> _T:
    """``step`` as a coroutine (``run_coroutine_threadsafe`` takes nothing else)."""
    return await step


__all__ = ["RetryPolicy", "Retrying", "ShortRead", "is_stall", "message", "unreachable"]
