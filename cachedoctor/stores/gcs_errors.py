"""What a Google Cloud Storage answer means (``gcs.py``'s twin of ``s3_errors.py``), and the
two shapes of the JSON API that are not plain JSON: its timestamps and its multipart uploads.

The GCS JSON API answers a failed request with an HTTP status and ``{"error": {"code",
"message"}}``. :func:`final_error` names the exception the caller gets for a status that waiting
cannot change (404 gone, 412 precondition failed, 401/403 credentials); 408, 429 and 5xx, like
connection resets and short bodies (:func:`transient_types`), are retried with the shared
:class:`~cachedoctor.stores.s3_errors.RetryPolicy` until its attempts are spent.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import secrets
import time

from cachedoctor.stores.interface import ObjectChanged, ObjectGone, RemoteError
from cachedoctor.stores.retrying import ShortRead, message

#: Statuses GCS sends for "try again later" (Google's retry strategy: 408, 429 and 5xx).
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class GCSStatus(Exception):
    """A request the server answered with a status of 400 or more."""

    def __init__(self, status: int, body: bytes, reason: str = "") -> None:
        self.status = status
        self.detail = _detail(body) or reason
        super().__init__(f"{status} {self.detail}".strip())


def _detail(body: bytes) -> str:
    """The error's message from a JSON API body, or the start of a body that is not one."""
    text = body.decode("utf-8", "replace").strip()
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return ""  # not the JSON API's (a proxy's page, another server): the HTTP reason instead
    if isinstance(error, dict):
        return str(error.get("message") or "")
    return str(error or "")


def transient_types() -> tuple[type[BaseException], ...]:
    import aiohttp

    return (
        ShortRead,
        ConnectionError,
        asyncio.TimeoutError,
        aiohttp.ClientConnectionError,
        aiohttp.ClientPayloadError,
    )


def final_error(exc: BaseException, url: str, bucket: str) -> Exception | None:
    """The exception a failed request ends in, or ``None`` when it is worth retrying."""
    if isinstance(exc, GCSStatus):
        status = exc.status
        if status in RETRY_STATUSES:
            return None
        if status == 404:
            return ObjectGone(url)
        if status in (412, 416):  # the generation moved on, or the object is shorter than listed
            return ObjectChanged(url)
        if status in (401, 403):
            return RemoteError(
                url,
                f"the server refused these credentials ({status} {exc.detail}); check GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`",
            )
        return RemoteError(url, f"the server said {status}: {exc.detail or 'no reason given'}")
    name = type(exc).__name__
    if name in {"RefreshError", "DefaultCredentialsError", "NonRetryableError"} or (
        name == "HttpError" and getattr(exc, "code", None) == 401
    ):
        return RemoteError(
            url,
            f"the Google credentials could not be used ({message(exc)}); check GOOGLE_APPLICATION_CREDENTIALS",
        )
    return RemoteError(url, f"the request failed: {name}: {message(exc)}")


def missing_bucket(url: str, bucket: str) -> RemoteError:
    return RemoteError(url, f"no bucket {bucket!r} at this endpoint; check the URL and STORAGE_EMULATOR_HOST")


def rfc3339_ns(value: str) -> int:
    """``2026-01-02T03:04:05.678Z`` (GCS's ``updated``) in nanoseconds since the epoch; Python
    3.10's ``fromisoformat`` takes neither the ``Z`` nor nine digits."""
    stamp = value.rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((fraction + "000000000")[:9] or 0)


def multipart(key: str, data: bytes) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an ``uploadType=multipart`` upload: the object's metadata (its
    name) and its bytes in one request, as Google's clients send a small object."""
    boundary = secrets.token_hex(16)
    body = b"".join(
        (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            json.dumps({"name": key}).encode(),
            f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
            data,
            f"\r\n--{boundary}--\r\n".encode(),
        )
    )
    return body, {"Content-Type": f"multipart/related; boundary={boundary}"}
